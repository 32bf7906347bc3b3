package redisstreams

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// TestDeadLetterUnsyncedLostInFailover tests what publishDead argues when
// it counts a dead letter the replicas did not acknowledge as stored (on
// one master, PublishSyncReplicas): the failed entry's ack reaches the
// replicas after the dead letter, so a failover that loses the dead
// letter loses the ack too, and the entry is dead-lettered again, never
// acked without one. Here a handler fails e1 (MaxDeliveries 1) and stalls
// replication as it returns, so the dead letter and the ack are on the
// master only; the master is killed and a replica that has neither is
// promoted. Asserted: before the kill the master held the dead letter
// and had acked e1; the promoted master never holds that dead letter (the
// failover lost it: the premise); within a bound, it holds another dead
// letter of e1 and nothing pending: e1's dead letter is not lost.
func TestDeadLetterUnsyncedLostInFailover(t *testing.T) {
	const topic = "dead-failover"
	d := startDeadStall(t, topic, nil)
	const ackDeadline = time.Second
	sub, err := d.b.Subscribe(t.Context(), topic, d.handler(t), pubsub.Group("g"), pubsub.MaxDeliveries(1), pubsub.AckDeadline(ackDeadline))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe(context.Background()) }()
	d.publishAndAwaitStall(t, topic)
	// The premise: the dead letter (its WAIT fell short after
	// PublishSyncTimeout, 200ms) counted as stored, and e1 acked, on the
	// master only. The sentinel deems a paused replica down after 2s, so
	// the failover must start before then.
	master := d.st.Master().Client(t)
	deadline := time.Now().Add(1500 * time.Millisecond)
	var lostID string
	for {
		ids, pending := deadLetters(t, master, d.deadKey, "e1"), groupPending(t, master, d.key, "g")
		if len(ids) == 1 && pending == 0 {
			lostID = ids[0]
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("premise: 1.5s after the stall the master holds dead letters %v of e1 and %d pending entries; want one and 0 (dead letter counted stored, e1 acked)", ids, pending)
		}
		time.Sleep(10 * time.Millisecond)
	}
	promoted, start := d.failover(t)
	// e1 is pending on the promoted master with no live handler (its ack
	// was lost with the master): the subscription takes it over after
	// the ack deadline and dead-letters it again (its count is past
	// MaxDeliveries), possibly before the failover call above returns.
	// Generous (30s): the client's reconnection, a reclaim interval, the
	// ack deadline, and a loaded machine.
	d.awaitDeadAgain(t, promoted, "g", lostID, start)
}

// deadLetters returns the stream ids of the entries of the dead-letter
// stream key whose event id is id.
func deadLetters(t *testing.T, c *redis.Client, key, id string) []string {
	t.Helper()
	msgs, err := c.XRange(t.Context(), key, "-", "+").Result()
	if err != nil {
		t.Fatalf("XRANGE %s: %v", key, err)
	}
	var ids []string
	for _, m := range msgs {
		if m.Values["id"] == id {
			ids = append(ids, m.ID)
		}
	}
	return ids
}

// groupPending returns how many entries of key are pending in group.
func groupPending(t *testing.T, c *redis.Client, key, group string) int64 {
	t.Helper()
	p, err := c.XPending(t.Context(), key, group).Result()
	if err != nil {
		t.Fatalf("XPENDING %s %s: %v", key, group, err)
	}
	return p.Count
}

// deadStall is the setup the dead-letter failover tests share: a Sentinel
// deployment with 2 replicas, a Backend with PublishSyncReplicas 1 on its
// client, and a handler that fails e1 and stalls replication as it returns
// (so the dead letter, and an ack, are on the master only).
type deadStall struct {
	st      *redistest.Sentinel
	b       *Backend
	key     string // the topic's stream
	deadKey string // its dead-letter stream
	runs    atomic.Int32
	stalled chan struct{}
	once    sync.Once
	resume  func()
	resumed atomic.Bool
	onStall func() // runs as e1 first fails, before the stall (optional)
}

// startDeadStall starts the deployment and a Backend on a client that hook,
// when not nil, is added to, and waits until the replica is in sync.
func startDeadStall(t *testing.T, topic string, hook redis.Hook) *deadStall {
	st := redistest.StartSentinel(t, 2)
	c := st.Client(t)
	if hook != nil {
		c.AddHook(hook)
	}
	b := psBackend(t, c, Options{PublishSyncReplicas: 1, PublishSyncTimeout: 200 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	d := &deadStall{st: st, b: b, key: b.keys.Stream(topic), deadKey: b.keys.Stream(pubsub.DeadLetterTopic(topic)), stalled: make(chan struct{})}
	awaitSynced(t, b, topic)
	t.Cleanup(d.resumeOnce)
	return d
}

// handler fails e1 every time; its first failure stalls replication.
func (d *deadStall) handler(t *testing.T) pubsub.Handler {
	return func(ctx context.Context, ev pubsub.Event) error {
		if ev.ID != "e1" {
			return nil
		}
		d.runs.Add(1)
		d.once.Do(func() {
			if d.onStall != nil {
				d.onStall()
			}
			d.resume = d.st.StallReplication(t)
			close(d.stalled)
		})
		return errors.New("fails") // dead-lettered (MaxDeliveries 1)
	}
}

// publishAndAwaitStall publishes e1 to topic and waits until its handler
// stalled replication.
func (d *deadStall) publishAndAwaitStall(t *testing.T, topic string) {
	t.Helper()
	// On a loaded machine the publish's WAIT (200ms) may fall short:
	// e1 is then on the master, and the read that delivers it waits for
	// the replica too, so the premise holds; a retry would store e1 twice.
	if err := d.b.Publish(t.Context(), topic, pubsub.Event{ID: "e1", Type: "t"}); err != nil && !errors.Is(err, ErrNotReplicated) {
		t.Fatal(err)
	}
	select {
	case <-d.stalled:
	case <-time.After(10 * time.Second):
		t.Fatal("e1 not run within 10s")
	}
}

// resumeOnce resumes replication, once, if it was stalled.
func (d *deadStall) resumeOnce() {
	select {
	case <-d.stalled:
	default:
		return
	}
	if d.resumed.CompareAndSwap(false, true) {
		d.resume()
	}
}

// failover kills the master, resumes the stalled replication as
// FailoverAfterKill asks, waits for the promotion, and returns the
// promoted master's client and when the kill began.
func (d *deadStall) failover(t *testing.T) (*redis.Client, time.Time) {
	start := time.Now()
	d.st.FailoverAfterKill(t, d.resumeOnce)
	return d.st.Master().Client(t), start
}

// awaitDeadAgain waits up to 30s from start for the promoted master to hold
// a dead letter of e1 and, when group is not empty, nothing pending in
// group: e1 was dead-lettered again after the failover lost the dead
// letter lostID (which it asserts the promoted master never holds).
func (d *deadStall) awaitDeadAgain(t *testing.T, promoted *redis.Client, group, lostID string, start time.Time) {
	t.Helper()
	const bound = 30 * time.Second
	for {
		ids := deadLetters(t, promoted, d.deadKey, "e1")
		var pending int64
		if group != "" {
			pending = groupPending(t, promoted, d.key, group)
		}
		for _, id := range ids {
			if id == lostID {
				t.Fatalf("premise: the promoted master holds the dead letter %s written during the stall; the stall did not keep it from the replicas", id)
			}
		}
		if len(ids) >= 1 && pending == 0 {
			t.Logf("the dead letter %s was lost with the master; e1 dead-lettered again as %v, %v after the kill began", lostID, ids, time.Since(start).Round(time.Millisecond))
			return
		}
		if time.Since(start) > bound {
			t.Fatalf("%v after the failover began the promoted master holds dead letters %v of e1 and %d pending entries: the dead letter %s the failover lost was not published again, and e1 is lost (handler ran %d times)", bound, ids, pending, lostID, d.runs.Load())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
