package redisstreams

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// TestUnsubscribeOnBlackHoleWaitsForNoRead: on a black-holed Redis (a peer
// that stops answering, connections open), group subscriptions whose reads
// are in flight or queued behind other subscriptions' read batches stop
// promptly: Unsubscribe(ctx) returns within ctx, and Unsubscribe with no
// deadline (what a signals tenure does as it ends) waits only for its own
// cleanup calls (one ReadTimeout, 300ms, each), never for the reads ahead
// of it. A version that always waited for a subscription's read took 5.1s
// (queued) and 2.8s (in flight) here, and 80s and 40s on go-redis's default
// timeouts.
func TestUnsubscribeOnBlackHoleWaitsForNoRead(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t, redistest.Options{})
	proxy := redistest.NewProxy(t, srv.Addr())
	c := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ReadTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond})
	t.Cleanup(func() { c.Close() })
	b := psBackend(t, c, Options{})
	ctx := context.Background()
	h := func(ctx context.Context, e pubsub.Event) error { return nil }
	var subs []pubsub.Subscription
	for _, topic := range []string{"ta", "tb", "tc", "td"} {
		s, err := b.Subscribe(ctx, topic, h, pubsub.Group("g"), pubsub.ReadOnDemand())
		if err != nil {
			t.Fatal(err)
		}
		subs = append(subs, s)
	}
	q := &b.bus.readQ.one // a standalone client: one lane
	state := func() (int, int) { q.mu.Lock(); defer q.mu.Unlock(); return q.active, len(q.queue) }
	waitFor := func(active, queued int) {
		deadline := time.Now().Add(5 * time.Second)
		for {
			a, l := state()
			if a == active && l == queued {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("readQ active %d queued %d, want %d %d", a, l, active, queued)
			}
			time.Sleep(time.Millisecond)
		}
	}
	waitFor(0, 0)
	proxy.BlackHole()
	t.Cleanup(proxy.Restore)
	subs[0].(pubsub.Kicker).Kick()
	waitFor(1, 0)
	subs[1].(pubsub.Kicker).Kick()
	waitFor(2, 0)
	subs[2].(pubsub.Kicker).Kick()
	waitFor(2, 1)
	subs[3].(pubsub.Kicker).Kick()
	waitFor(2, 2)

	// Unsubscribe with a deadline: must return within it.
	start := time.Now()
	sctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	err := subs[3].Unsubscribe(sctx)
	cancel()
	t.Logf("queued sub, Unsubscribe(200ms ctx) = %v after %v", err, time.Since(start).Round(time.Millisecond))
	if time.Since(start) > time.Second {
		t.Errorf("Unsubscribe(ctx) overran its ctx")
	}
	// Unsubscribe with Background, as signals does at a tenure's end.
	start = time.Now()
	err = subs[2].Unsubscribe(ctx)
	d := time.Since(start)
	t.Logf("queued sub, Unsubscribe(Background) = %v after %v", err, d.Round(time.Millisecond))
	if d > 2*time.Second {
		t.Errorf("Unsubscribe of a subscription whose read was queued took %v on a black-holed server, want < 2s", d)
	}
	start = time.Now()
	err = subs[0].Unsubscribe(ctx)
	d = time.Since(start)
	t.Logf("leader sub, Unsubscribe(Background) = %v after %v", err, d.Round(time.Millisecond))
	if d > 2*time.Second {
		t.Errorf("Unsubscribe of a subscription whose read was in flight took %v on a black-holed server, want < 2s", d)
	}
}
