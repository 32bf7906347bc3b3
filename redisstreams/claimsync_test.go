package redisstreams

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// delivery is one handing on of an event to a handler.
type delivery struct {
	who     string
	attempt int
	at      time.Time
}

// deliveryLog records the deliveries of one event id.
type deliveryLog struct {
	mu   sync.Mutex
	got  []delivery
	news chan struct{}
}

func newDeliveryLog() *deliveryLog { return &deliveryLog{news: make(chan struct{}, 64)} }

func (l *deliveryLog) handler(who, id string) pubsub.Handler {
	return func(_ context.Context, ev pubsub.Event) error {
		if ev.ID == id {
			l.mu.Lock()
			l.got = append(l.got, delivery{who: who, attempt: ev.DeliveryAttempt, at: time.Now()})
			l.mu.Unlock()
			select {
			case l.news <- struct{}{}:
			default:
			}
		}
		return nil
	}
}

func (l *deliveryLog) all() []delivery {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]delivery(nil), l.got...)
}

func (l *deliveryLog) handed() bool { return len(l.all()) > 0 }

// await waits up to d for at least n deliveries and returns them all.
func (l *deliveryLog) await(n int, d time.Duration) []delivery {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		if got := l.all(); len(got) >= n {
			return got
		}
		select {
		case <-l.news:
		case <-deadline.C:
			return l.all()
		}
	}
}

// pendingOn polls XPENDING of group on the server of c until id is pending
// on a consumer other than not (any when ""), delivered at least count
// times, and returns that consumer; or until handed reports true (the
// entry reached a handler, and may be acked by now), returning "". It
// fails t after d.
func pendingOn(t *testing.T, c *redis.Client, key, group, id, not string, count int64, d time.Duration, handed func() bool) string {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		if handed() {
			return ""
		}
		pend, err := c.XPendingExt(context.Background(), &redis.XPendingExtArgs{
			Stream: key, Group: group, Start: id, End: id, Count: 1,
		}).Result()
		if err == nil && len(pend) == 1 && pend[0].Consumer != not && pend[0].RetryCount >= count {
			return pend[0].Consumer
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not pending on a consumer other than %q with count >= %d within %v (XPENDING: %v, %v)", id, not, count, d, pend, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestPublishSyncClaimWaits: with PublishSyncReplicas, a claim of another
// member's entry ends with WAIT too, and what a claim the replicas did not
// acknowledge took is not handed on. A member read e1 with the one replica
// paused (a raw XREADGROUP of consumer "dead", which never reads again:
// its read is on the master only) and another member claims it, at its
// start (ClaimPending) or as the entry of a silent member past its
// AckDeadline (the reclaim pass, of a plain and of an on-demand
// subscription, kicked once). While the replica is paused, no handler
// gets e1: a failover then would leave the promoted master with e1 never
// delivered, and a claim handed on would run again as a first delivery
// (TestPublishSyncClaimOfUnsyncedRead). Once the replica resumes, e1 is
// handed on, once, as attempt 2 (the dead member's read counts, the
// unacknowledged claims do not: undoClaim). The on-demand subscription
// finds it only because the claims are undone, so that the entry stays
// another member's and the subscription keeps looking: when the first
// version of this fix left it pending on the claimer, no later pass
// looked, and e1 was not handed on within 15s of the resume.
func TestPublishSyncClaimWaits(t *testing.T) {
	t.Parallel()
	st := redistest.StartSentinel(t, 1)
	b := psBackend(t, st.Client(t), Options{PublishSyncReplicas: 1, PublishSyncTimeout: 200 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	ctx := t.Context()
	master := st.Master().Client(t)
	for _, name := range []string{"ClaimPending", "reclaim", "reclaim-on-demand"} {
		claimPending, onDemand := name == "ClaimPending", name == "reclaim-on-demand"
		t.Run(name, func(t *testing.T) {
			topic := "claimwait-" + name
			key := b.keys.Stream(topic)
			awaitSynced(t, b, topic)
			// The group starts after the warm-up event awaitSynced wrote.
			if err := master.XGroupCreate(ctx, key, "g", "$").Err(); err != nil {
				t.Fatal(err)
			}
			if err := b.Publish(ctx, topic, pubsub.Event{ID: "e1", Type: "t"}); err != nil {
				t.Fatal(err)
			}
			replica := replicaOf(t, st)
			replica.Pause(t)
			resumed := false
			defer func() {
				if !resumed {
					replica.Resume(t)
				}
			}()
			id := deadRead(t, master, key)
			const ackDeadline = time.Second
			log := newDeliveryLog()
			opts := []pubsub.SubscribeOption{pubsub.Group("g"), pubsub.AckDeadline(ackDeadline)}
			if claimPending {
				opts = append(opts, pubsub.ClaimPending())
			}
			if onDemand {
				opts = append(opts, pubsub.ReadOnDemand())
			}
			sub, err := b.Subscribe(ctx, topic, log.handler("B", "e1"), opts...)
			if err != nil {
				t.Fatal(err)
			}
			if onDemand {
				// Told once that there is work: it looks until it finds
				// the dead member's entry.
				sub.(pubsub.Kicker).Kick()
			}
			defer func() { _ = sub.Unsubscribe(ctx) }()
			// The claim ran on the master (count 2), unacknowledged.
			wait := 2 * time.Second
			if !claimPending {
				wait += 2 * ackDeadline // silent for AckDeadline, then a reclaim pass
			}
			pendingOn(t, master, key, "g", id, "dead", 2, wait, log.handed)
			if got := log.await(1, 500*time.Millisecond); len(got) > 0 {
				t.Errorf("e1 handed on (attempt %d) while the replica was paused: the claim was not acknowledged", got[0].attempt)
			}
			replica.Resume(t)
			resumed = true
			got := log.await(1, 15*time.Second)
			if len(got) == 0 {
				t.Fatal("e1 not handed on within 15s of the replica's resume")
			}
			if got[0].attempt != 2 {
				t.Errorf("e1 handed on with DeliveryAttempt %d, want 2 (the dead member's read delivered it; the unacknowledged claims were undone)", got[0].attempt)
			}
			if got = log.await(2, 2*ackDeadline); len(got) != 1 {
				t.Errorf("e1 handed on %d times, want 1: %+v", len(got), got)
			}
		})
	}
}

// TestPublishSyncClaimOfUnsyncedRead: what the claim's wait is for (review
// revX's scenario). Sentinel with two replicas, PublishSyncReplicas 1.
// Replication stalls; member A's read delivers e1 (on the master only: A
// hands nothing on, TestPublishSyncReadWaits); member B starts with
// ClaimPending and claims e1 from A in the same stall; the master dies
// and a replica that missed the stall is promoted. Without the claim's
// wait, B ran e1 as attempt 2 before the failover and the promoted master
// gave it again as attempt 1, a repeat not marked as one. Asserted: no
// handler got e1 before the failover, and every delivery after the first
// is marked (DeliveryAttempt > 1); e1 runs after the failover (the other
// replica follows the promoted master, so the reads' WAIT succeeds again).
func TestPublishSyncClaimOfUnsyncedRead(t *testing.T) {
	st := redistest.StartSentinel(t, 2)
	b := psBackend(t, st.Client(t), Options{PublishSyncReplicas: 1, PublishSyncTimeout: 200 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	ctx := t.Context()
	const topic = "claim-unsynced"
	key := b.keys.Stream(topic)
	awaitSynced(t, b, topic)
	master := st.Master().Client(t)
	// The group starts after the warm-up event awaitSynced wrote.
	if err := master.XGroupCreate(ctx, key, "g", "$").Err(); err != nil {
		t.Fatal(err)
	}
	if err := b.Publish(ctx, topic, pubsub.Event{ID: "e1", Type: "t"}); err != nil {
		t.Fatal(err)
	}
	id, err := master.XRevRangeN(ctx, key, "+", "-", 1).Result()
	if err != nil || len(id) != 1 || id[0].Values["id"] != "e1" {
		t.Fatalf("XREVRANGE: %v, %v", id, err)
	}
	resume := st.StallReplication(t)
	log := newDeliveryLog()
	subA, err := b.Subscribe(ctx, topic, log.handler("A", "e1"), pubsub.Group("g"), pubsub.StartFrom(pubsub.Earliest))
	if err != nil {
		resume()
		t.Fatal(err)
	}
	defer func() { _ = subA.Unsubscribe(context.Background()) }()
	a := pendingOn(t, master, key, "g", id[0].ID, "", 1, time.Second, log.handed)
	subB, err := b.Subscribe(ctx, topic, log.handler("B", "e1"), pubsub.Group("g"), pubsub.StartFrom(pubsub.Earliest), pubsub.ClaimPending())
	if err != nil {
		resume()
		t.Fatal(err)
	}
	defer func() { _ = subB.Unsubscribe(context.Background()) }()
	if a != "" {
		pendingOn(t, master, key, "g", id[0].ID, a, 2, time.Second, log.handed)
	}
	before := log.await(1, 300*time.Millisecond)
	st.FailoverAfterKill(t, resume)
	for _, d := range before {
		t.Errorf("%s got e1 (attempt %d) before the failover, from a read or claim the replicas had not acknowledged", d.who, d.attempt)
	}
	got := log.await(len(before)+1, 30*time.Second)
	if len(got) == len(before) {
		t.Fatalf("e1 did not run within 30s of the failover (deliveries: %+v)", got)
	}
	for i, d := range got {
		if i > 0 && d.attempt <= 1 {
			t.Errorf("delivery %d of e1 (%s, after %+v) has DeliveryAttempt %d: a repeat not marked as one", i+1, d.who, got[:i], d.attempt)
		}
	}
	t.Logf("deliveries of e1: %s", fmt.Sprint(got))
}

// BenchmarkGroupReadSync measures what PublishSyncReplicas costs a group
// subscription's deliveries (its reads end with WAIT): on a local master
// with one replica, a subscriber Backend without and with the option (the
// publisher Backend never waits). "drain": b.N events published first,
// then the time for one group subscription to get them all (reads of up to
// BatchSize, each with its WAIT). "one-by-one": publish one event, wait
// for the handler, b.N times (a delivery's latency, the read's WAIT on
// its path).
func BenchmarkGroupReadSync(b *testing.B) {
	st := redistest.StartSentinel(b, 1)
	c := redis.NewClient(&redis.Options{Addr: st.Master().Addr()})
	b.Cleanup(func() { c.Close() })
	ctx := context.Background()
	ev := pubsub.Event{Type: "bench", Data: []byte("0123456789abcdef0123456789abcdef")}
	for _, mode := range []string{"drain", "one-by-one"} {
		for _, replicas := range []int{0, 1} {
			b.Run(fmt.Sprintf("%s/PublishSyncReplicas=%d", mode, replicas), func(b *testing.B) {
				prefix := psPrefix()
				pub, err := New(c, Options{Prefix: prefix, MaxLen: -1, Logger: slog.New(slog.DiscardHandler)})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { pub.Close() })
				be, err := New(c, Options{Prefix: prefix, PublishSyncReplicas: replicas, Logger: slog.New(slog.DiscardHandler)})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { be.Close() })
				got := make(chan struct{}, 1)
				var seen atomic.Int64
				n := int64(b.N)
				handler := func(context.Context, pubsub.Event) error {
					if mode == "one-by-one" || seen.Add(1) == n {
						got <- struct{}{}
					}
					return nil
				}
				if mode == "drain" {
					for i := 0; i < b.N; i += 512 {
						batch := make([]pubsub.Publication, min(512, b.N-i))
						for j := range batch {
							batch[j] = pubsub.Publication{Topic: "bench", Event: ev}
						}
						if err := pub.PublishBatch(ctx, batch); err != nil {
							b.Fatal(err)
						}
					}
					b.ResetTimer()
					sub, err := be.Subscribe(ctx, "bench", handler, pubsub.Group("g"), pubsub.StartFrom(pubsub.Earliest))
					if err != nil {
						b.Fatal(err)
					}
					<-got
					b.StopTimer()
					_ = sub.Unsubscribe(ctx)
				} else {
					sub, err := be.Subscribe(ctx, "bench", handler, pubsub.Group("g"))
					if err != nil {
						b.Fatal(err)
					}
					b.ResetTimer()
					for range b.N {
						if err := pub.Publish(ctx, "bench", ev); err != nil {
							b.Fatal(err)
						}
						<-got
					}
					b.StopTimer()
					_ = sub.Unsubscribe(ctx)
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
			})
		}
	}
}

// publishSynced publishes event id to topic, a test's setup step, on b
// (PublishSyncReplicas 1 with a short PublishSyncTimeout) and returns once
// the master's replica holds it. A WAIT that fell short on a loaded machine
// (ErrNotReplicated) left the event on the master, so it is not published
// again (that would store it twice): awaitSyncedClient waits on master until
// the replica acknowledged a write made after it.
func publishSynced(t *testing.T, b *Backend, master *redis.Client, topic, id string) {
	t.Helper()
	err := b.Publish(t.Context(), topic, pubsub.Event{ID: id, Type: "t"})
	switch {
	case errors.Is(err, ErrNotReplicated):
		t.Logf("publish %s: %v; waiting for the replica", id, err)
		awaitSyncedClient(t, master)
	case err != nil:
		t.Fatalf("publish %s: %v", id, err)
	}
}

// deadRead reads the next entry of stream key for consumer "dead" of group
// "g" on c's server (a member that reads once and never again), which
// must be event e1, and returns its id.
func deadRead(t *testing.T, c *redis.Client, key string) string {
	t.Helper()
	read, err := c.XReadGroup(t.Context(), &redis.XReadGroupArgs{Group: "g", Consumer: "dead", Streams: []string{key, ">"}, Count: 1}).Result()
	if err != nil || len(read) != 1 || len(read[0].Messages) != 1 || read[0].Messages[0].Values["id"] != "e1" {
		t.Fatalf("the dead member's read: %v, %v", read, err)
	}
	return read[0].Messages[0].ID
}
