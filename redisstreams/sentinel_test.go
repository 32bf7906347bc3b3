package redisstreams

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/pubsub"
)

// TestSentinelFailoverResumes kills the master under a group subscriber and
// a publisher on failover clients and checks that both carry on against the
// promoted replica.
//
// Replication is asynchronous: writes the old master acknowledged but had
// not yet sent to the replica when it died are lost, so events published
// before the failover (and acks, so some may be delivered again) are not
// asserted on after it. What the design guarantees, and what is asserted,
// is that every event whose Publish returned nil after the failover is
// delivered to the group, and that leases work on the new master.
func TestSentinelFailoverResumes(t *testing.T) {
	st := redistest.StartSentinel(t, 1)
	opts := Options{Prefix: psPrefix(), BlockTime: 500 * time.Millisecond} // one key space for both
	sub := psBackend(t, st.Client(t), opts)
	pub := psBackend(t, st.Client(t), opts)
	ctx := t.Context()
	const topic = "failover"

	// Each subscription records the ids it has seen; news wakes waitSeen.
	var (
		mu   sync.Mutex
		seen = map[string]map[string]bool{"group": {}, "fanout": {}}
		news = make(chan struct{}, 1)
	)
	record := func(kind string) pubsub.Handler {
		return func(_ context.Context, e pubsub.Event) error {
			mu.Lock()
			seen[kind][e.ID] = true
			mu.Unlock()
			select {
			case news <- struct{}{}:
			default:
			}
			return nil
		}
	}
	gs, err := sub.Subscribe(ctx, topic, record("group"), pubsub.Group("g"))
	if err != nil {
		t.Fatalf("Subscribe (group): %v", err)
	}
	t.Cleanup(func() { _ = gs.Unsubscribe(context.Background()) })
	fs, err := sub.Subscribe(ctx, topic, record("fanout"))
	if err != nil {
		t.Fatalf("Subscribe (fan-out): %v", err)
	}
	t.Cleanup(func() { _ = fs.Unsubscribe(context.Background()) })

	// waitSeen waits (bounded) until both subscriptions have seen every id
	// and returns what each is missing.
	waitSeen := func(ids []string, timeout time.Duration) map[string][]string {
		deadline := time.After(timeout)
		for {
			missing := map[string][]string{}
			mu.Lock()
			for kind, got := range seen {
				for _, id := range ids {
					if !got[id] {
						missing[kind] = append(missing[kind], id)
					}
				}
			}
			mu.Unlock()
			if len(missing) == 0 {
				return nil
			}
			select {
			case <-news:
			case <-time.After(50 * time.Millisecond):
			case <-deadline:
				return missing
			}
		}
	}

	const n = 50
	var before []string
	for i := range n {
		id := fmt.Sprintf("before-%d", i)
		if err := pub.Publish(ctx, topic, pubsub.Event{ID: id, Type: "t"}); err != nil {
			t.Fatalf("Publish %s before the failover: %v", id, err)
		}
		before = append(before, id)
	}
	// While the master is up, delivery is guaranteed; waiting for it also
	// leaves both readers blocked on the master when it is killed.
	if missing := waitSeen(before, 10*time.Second); missing != nil {
		t.Fatalf("events published before the failover not delivered within 10s (of %d): %v", n, missing)
	}

	// A lease backend used before the failover: it has seen its scripts
	// cached on the old master, which the promoted replica does not have
	// (scripts are replicated as their effects), so after the failover its
	// calls go through the NOSCRIPT fallback.
	lb := newBackendOn(t, st.Client(t))
	const ttl = 5 * time.Second
	if r := mustAcquire(t, lb, "warmup", "a", ttl); !r.Acquired {
		t.Fatalf("AcquireLease before the failover = %+v, want acquired", r)
	}
	mustRelease(t, lb, "warmup", "a")

	start := time.Now()
	st.Failover(t)
	t.Logf("failover took %v", time.Since(start))

	// The first publishes may fail while the failover client rediscovers
	// the master. A failed attempt may still have been written (the reply
	// was lost), so it is retried under the same id and only ids whose
	// Publish returned nil are asserted on.
	failed := 0
	publish := func(id string) error {
		deadline := time.Now().Add(15 * time.Second)
		for {
			pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			err := pub.Publish(pctx, topic, pubsub.Event{ID: id, Type: "t"})
			cancel()
			if err == nil || time.Now().After(deadline) {
				return err
			}
			failed++
			time.Sleep(100 * time.Millisecond)
		}
	}
	var after []string
	for i := range n {
		id := fmt.Sprintf("after-%d", i)
		if err := publish(id); err != nil {
			t.Fatalf("Publish %s after the failover: still failing after 15s: %v", id, err)
		}
		after = append(after, id)
	}
	t.Logf("published %d events after the failover (%d failed attempts) %v after it started", n, failed, time.Since(start))
	if missing := waitSeen(after, 20*time.Second); missing != nil {
		t.Fatalf("events published (nil error) after the failover not delivered within 20s (of %d): %v", n, missing)
	}
	t.Logf("all events published after the failover delivered %v after it started", time.Since(start))

	// A lease taken after the failover works on the new master. lb's own
	// client may not have noticed the failover yet, so its first acquire is
	// retried like Publish; an attempt that failed may have been applied,
	// which a retry by the same owner just re-acquires.
	var r lease.Result
	deadline := time.Now().Add(15 * time.Second)
	for {
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		r, err = lb.AcquireLease(actx, "failover.job", "a", ttl)
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("AcquireLease after the failover: still failing after 15s: %v", err)
		}
		t.Logf("AcquireLease after the failover failed, retrying: %v", err)
		time.Sleep(100 * time.Millisecond)
	}
	if !r.Acquired || r.Owner != "a" || r.Token <= 0 {
		t.Fatalf("AcquireLease after the failover = %+v, want acquired by a with a token > 0", r)
	}
	if !mustRenew(t, lb, "failover.job", "a", ttl) {
		t.Fatal("RenewLease after the failover = false, want true")
	}
	if got := mustOwner(t, lb, "failover.job"); got != "a" {
		t.Fatalf("GetLeaseOwner = %q, want a", got)
	}
	mustRelease(t, lb, "failover.job", "a")
	if got := mustOwner(t, lb, "failover.job"); got != "" {
		t.Fatalf("GetLeaseOwner after ReleaseLease = %q, want none", got)
	}
}
