package redisstreams

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// TestLateReadAfterChecksRunsNothing: a group read held in the network (a
// proxy keeps its bytes) past go-redis's ReadTimeout, and delivered to the
// server only after the subscription's later reads succeeded and its
// lost-read checks ended, as a TCP retransmission after a partition heals
// delivers a request whose client gave up. The server must not run it:
// before reads were guarded (a per-consumer read sequence checked in the
// read script), it did, delivering e2 (published meanwhile) to the consumer
// unseen, so that the reclaim pass took it after AckDeadline as attempt 2
// and, under MaxDeliveries(1), dead-lettered it without any handler
// running it. Found by review 5 of 2026-11-22.
func TestLateReadAfterChecksRunsNothing(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t, redistest.Options{})
	px := redistest.NewProxy(t, srv.Addr())
	ctx := context.Background()
	logger, fails := readFailures(slog.Default().Handler())
	b, err := NewURL(ctx, "redis://"+px.Addr(), Options{Prefix: psPrefix(), Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	// Publishes go straight to the server, never through the proxy.
	pub, err := NewURL(ctx, srv.URL(), Options{Prefix: b.opts.Prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close() })

	var dead atomic.Int64
	countDeadLetters(t, pub, "t", &dead)
	var (
		mu  sync.Mutex
		ran []string // "<id of the event's data>#<attempt>"
	)
	sub, err := b.Subscribe(ctx, "t", func(ctx context.Context, e pubsub.Event) error {
		mu.Lock()
		ran = append(ran, fmt.Sprintf("%s#%d", e.Data, e.DeliveryAttempt))
		mu.Unlock()
		return nil
	}, pubsub.Group("g"), pubsub.StartFrom(pubsub.Earliest), pubsub.ReadOnDemand(),
		pubsub.MaxDeliveries(1), pubsub.AckDeadline(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe(ctx)
	g := sub.(*groupSub)
	ranAll := func(want ...string) bool {
		mu.Lock()
		defer mu.Unlock()
		return strings.Join(ran, " ") == strings.Join(want, " ")
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				mu.Lock()
				defer mu.Unlock()
				t.Fatalf("%s: not within 20s (ran %v, %d dead-lettered)", what, ran, dead.Load())
			}
			g.Kick()
			time.Sleep(20 * time.Millisecond)
		}
	}
	publish := func(data string) {
		if err := pub.Publish(ctx, "t", pubsub.Event{Type: "x", Data: []byte(data)}); err != nil {
			t.Fatal(err)
		}
	}

	publish("e1")
	// Hold the next group read (every read pipeline carries an XLEN).
	px.HoldNext(func(b []byte) bool { return strings.Contains(strings.ToUpper(string(b)), "XLEN") })
	g.Kick()
	select {
	case <-fails: // go-redis's ReadTimeout (3s) passed: the read failed
	case <-time.After(20 * time.Second):
		t.Fatal("the held read did not fail within 20s")
	}
	// Later reads go on other connections: e1 runs, and the checks for
	// what the failed read might have delivered end.
	waitFor("e1 run", func() bool { return ranAll("e1#1") })
	waitFor("lost-read checks ended", func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return !g.suspect
	})

	publish("e2") // not kicked: only the late read could take it now
	if n := px.Release(); n != 1 {
		t.Fatalf("released %d held connections, want 1", n)
	}
	waitFor("e2 run", func() bool { return ranAll("e1#1", "e2#1") || dead.Load() > 0 })
	if !ranAll("e1#1", "e2#1") {
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("ran %v and dead-lettered %d; want e1#1 e2#1 and nothing dead-lettered", ran, dead.Load())
	}
	if dead.Load() > 0 {
		t.Fatalf("%d dead-lettered", dead.Load())
	}
}
