package redisstreams

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// TestFlushCancelledOnStalledServer: Flush's doc says it "returns
// ctx.Err() when ctx ends first". Here: a NewURL client (go-redis
// defaults), a group subscription on a topic this Backend published to
// (so Flush checks the group on the server: groupSub.caughtUp sends XINFO
// GROUPS + XPENDING on Flush's ctx), then the
// server is stopped (SIGSTOP) and Flush is called with a ctx cancelled 200ms
// later (no deadline). Flush must return within 1s of the cancel.
//
// Found by review (rev3, 2026-11-27): Flush returned 4.8s after the cancel
// (3 of 3): go-redis does not end a blocked read when its ctx is cancelled,
// and caughtUp's pipeline was sent on Flush's ctx directly. It now goes
// through awaitSend.
func TestFlushCancelledOnStalledServer(t *testing.T) {
	// Without load: under load Flush may first wait in acks.flush for
	// acks queued before the stall, which does watch ctx, and return at
	// the cancel; it blocks when the acks were written before the stall
	// and it reaches caughtUp (1 of 2 runs with 16 publishers).
	flushCancelledOnStall(t, false)
}

func flushCancelledOnStall(t *testing.T, load bool) {
	redistest.Require(t)
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	b := urlBackend(t, srv.URL(), Options{})
	sub, err := b.Subscribe(ctx, "ft", func(context.Context, pubsub.Event) error { return nil }, pubsub.Group("g"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		uctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_ = sub.Unsubscribe(uctx)
	})
	if err := b.Publish(ctx, "ft", pubsub.Event{Type: "x", Data: []byte("d")}); err != nil {
		t.Fatal(err)
	}
	fctx0, cancel0 := context.WithTimeout(ctx, 5*time.Second)
	if err := b.Flush(fctx0); err != nil {
		t.Fatal(err)
	}
	cancel0()

	lctx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	if load {
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for lctx.Err() == nil {
					_ = b.Publish(lctx, "ft", pubsub.Event{Type: "x", Data: []byte("d")})
				}
			}()
		}
		time.Sleep(300 * time.Millisecond)
	}
	srv.Pause(t)
	resumed := false
	defer func() {
		if !resumed {
			srv.Resume(t)
		}
	}()
	fctx, cancel := context.WithCancel(ctx)
	var cancelledAt time.Time
	var mu sync.Mutex
	time.AfterFunc(200*time.Millisecond, func() {
		mu.Lock()
		cancelledAt = time.Now()
		mu.Unlock()
		cancel()
		stopLoad()
	})
	ferr := b.Flush(fctx)
	returned := time.Now()
	mu.Lock()
	d := returned.Sub(cancelledAt)
	mu.Unlock()
	wg.Wait()
	srv.Resume(t)
	resumed = true
	t.Logf("Flush returned %v after the cancel: %v", d.Round(time.Millisecond), ferr)
	if d > time.Second {
		t.Errorf("Flush returned %v after its ctx was cancelled on a stalled server, want within 1s (doc: returns ctx.Err() when ctx ends first)", d.Round(time.Millisecond))
	}
}
