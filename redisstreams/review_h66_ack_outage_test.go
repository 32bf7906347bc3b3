package redisstreams

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// TestReviewH66AckSurvivesRefusedOutage: a Backend from NewURL (go-redis's
// defaults) whose Redis refuses connections for a while (a restart, a load
// balancer with no backend: every call fails at once instead of timing out)
// right as a handler returns nil. Flush says it waits "until every ack
// queued before the call is written to Redis", and the package doc says the
// ack writer's give-up takes nine tries each waiting out the client's
// timeouts, "nothing else can claim the entry meanwhile, and the XACK lands
// when the server answers again". Review h66: with fast failures the nine
// tries end within seconds, the ack is dropped, Flush returns nil with the
// entry still pending, and once Redis is back the subscription takes its
// own acked entry over after the ack deadline and runs it again.
func TestReviewH66AckSurvivesRefusedOutage(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t, redistest.Options{})
	proxy := redistest.NewProxy(t, srv.Addr())
	ctx := context.Background()
	prefix := psPrefix()
	b1 := urlBackend(t, "redis://"+proxy.Addr()+"/0", Options{Prefix: prefix})
	direct := srv.Client(t)
	b2 := psBackend(t, direct, Options{Prefix: prefix}) // publishes, never faulted

	const ackDeadline = 2 * time.Second
	var runs atomic.Int32
	sub, err := b1.Subscribe(ctx, "t", func(ctx context.Context, e pubsub.Event) error {
		if runs.Add(1) == 1 {
			// The outage starts as the handler acks.
			proxy.SetRefuse(true)
			proxy.CutAll()
		}
		return nil
	}, pubsub.Group("g"), pubsub.AckDeadline(ackDeadline))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe(ctx) })
	if err := b2.Publish(ctx, "t", pubsub.Event{ID: "x", Type: "x"}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for runs.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("not delivered within 30s")
		}
		time.Sleep(5 * time.Millisecond)
	}

	// Flush while Redis refuses: it may wait (until its ctx) or fail, but a
	// nil must mean the ack is on the server.
	key := b1.keys.Stream("t")
	const outage = 20 * time.Second
	fctx, cancel := context.WithTimeout(ctx, outage)
	start := time.Now()
	ferr := b1.Flush(fctx)
	cancel()
	took := time.Since(start)
	pend, perr := direct.XPending(ctx, key, "g").Result()
	if perr != nil {
		t.Fatal(perr)
	}
	t.Logf("Flush during the outage = %v after %v; pending on the server: %d", ferr, took.Round(time.Millisecond), pend.Count)
	if ferr == nil && pend.Count != 0 {
		t.Errorf("Flush returned nil after %v with the acked entry still pending on the server (its ack was given up on)", took.Round(time.Millisecond))
	}
	if rest := outage - took; rest > 0 {
		time.Sleep(rest) // the outage lasts outage in all
	}
	proxy.SetRefuse(false)

	// Redis is back: the ack must land and the event must not run again
	// on the member that acked it.
	fctx, cancel = context.WithTimeout(ctx, 60*time.Second)
	err = b1.Flush(fctx)
	cancel()
	if err != nil {
		t.Errorf("Flush after the outage: %v", err)
	}
	wait := time.Now().Add(4 * ackDeadline)
	for time.Now().Before(wait) && runs.Load() == 1 {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("the event whose handler returned nil ran %d times on its lone member (its ack was dropped during a %v outage)", n, outage)
	}
	pend, perr = direct.XPending(ctx, key, "g").Result()
	if perr != nil {
		t.Fatal(perr)
	}
	if pend.Count != 0 {
		t.Errorf("%d entries pending after the outage", pend.Count)
	}
}
