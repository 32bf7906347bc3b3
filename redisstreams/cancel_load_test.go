package redisstreams

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// TestCancelledCallsUnderLoadOnStalledServer: doc.go, "Clients and
// deadlines", says the single-lease calls return when their ctx ends, deadline
// or cancel, with any client. Under load most calls go through the
// coalescing combiner, where a queued caller may be handed a batch to lead.
// Here: a NewURL client (go-redis defaults), 32 callers cycling
// acquire/release on their own keys with one ctx that can end; the server
// is stopped (SIGSTOP), and 200ms later the ctx is cancelled (or its
// deadline passes). Every call must return within 1s of that.
//
// Found by review (rev1, 2026-11-27): a caller handed a batch sent it
// itself on context.Background (runLease: sendLeaseBatch), so it waited for
// go-redis's timeouts: the last caller returned 35.0s after the cancel (5
// of 5 runs; 30-35s with a deadline). The leader now sends the batch from a
// goroutine of its own when its ctx can end, as a lone send does.
func TestCancelledCallsUnderLoadOnStalledServer(t *testing.T) {
	t.Run("Cancel", func(t *testing.T) { cancelledUnderLoad(t, false) })
	// The same with a ctx deadline instead of a cancel: NewURL's client
	// honours deadlines (ContextTimeoutEnabled), but a batch is sent on
	// context.Background, for all its callers.
	t.Run("Deadline", func(t *testing.T) { cancelledUnderLoad(t, true) })
}

func cancelledUnderLoad(t *testing.T, deadline bool) {
	redistest.Require(t)
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	b, err := NewURL(ctx, srv.URL(), Options{Prefix: psPrefix()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })

	cctx, cancel := context.WithCancel(ctx)
	if deadline {
		cctx, cancel = context.WithTimeout(ctx, 700*time.Millisecond) // 500ms of load + 200ms of stall
	}
	defer cancel()
	const callers = 32
	var wg sync.WaitGroup
	var mu sync.Mutex
	var lastReturn time.Time
	var slowest time.Duration
	var cancelledAt time.Time
	var cycles [callers]int
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("k%d", i)
			owner := fmt.Sprintf("o%d", i)
			for cctx.Err() == nil {
				if _, err := b.AcquireLease(cctx, key, owner, time.Minute); err != nil {
					break
				}
				if err := b.ReleaseLease(cctx, key, owner); err != nil {
					break
				}
				cycles[i]++
			}
			now := time.Now()
			mu.Lock()
			if now.After(lastReturn) {
				lastReturn = now
			}
			if !cancelledAt.IsZero() {
				if d := now.Sub(cancelledAt); d > slowest {
					slowest = d
				}
			}
			mu.Unlock()
		}()
	}
	time.Sleep(500 * time.Millisecond) // load running
	srv.Pause(t)
	resumed := false
	defer func() {
		if !resumed {
			srv.Resume(t)
		}
	}()
	time.Sleep(200 * time.Millisecond)
	mu.Lock()
	if deadline {
		<-cctx.Done()
	}
	cancelledAt = time.Now()
	mu.Unlock()
	cancel()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		buf := make([]byte, 1<<20)
		n := runtime.Stack(buf, true)
		for _, g := range strings.Split(string(buf[:n]), "\n\n") {
			if strings.Contains(g, "cancelledUnderLoad") && strings.Contains(g, "runLease") {
				t.Logf("a caller still in runLease 2s after the cancel (in sendLeaseBatch: %t):\n%s", strings.Contains(g, "sendLeaseBatch"), g)
			}
		}
	}
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		buf := make([]byte, 1<<20)
		n := runtime.Stack(buf, true)
		t.Logf("%s", buf[:n])
		t.Fatal("callers still running 60s after the cancel")
	}
	srv.Resume(t)
	resumed = true
	total := 0
	for _, n := range cycles {
		total += n
	}
	d := lastReturn.Sub(cancelledAt)
	t.Logf("%d cycles before the stall; last caller returned %v after the cancel", total, d.Round(time.Millisecond))
	if d > time.Second {
		t.Errorf("a lease call returned %v after its ctx was cancelled on a stalled server, want within 1s", d.Round(time.Millisecond))
	}
}

// TestSubscribeCancelledOnStalledServer: pubsub.Subscribe's ctx bounds its
// setup; a group subscription's setup (createGroupAndGuard, one round trip
// go-redis never retries) and a fan-out's from Latest (the stream's last ID)
// return when their ctx is cancelled while the server is stopped (SIGSTOP),
// with an error wrapping context.Canceled, not after the client's timeouts
// (NewURL client, go-redis defaults: 5.0s for the group's before). The
// signals runtime's inbox subscriptions rely on it to keep Close bounded
// (TestCloseOnStalledServerUnderAcquireLoad).
func TestSubscribeCancelledOnStalledServer(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	b, err := NewURL(ctx, srv.URL(), Options{Prefix: psPrefix()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	nop := func(context.Context, pubsub.Event) error { return nil }
	if _, err := b.Subscribe(ctx, "warm", nop, pubsub.Group("g")); err != nil {
		t.Fatal(err) // the connection is up
	}
	srv.Pause(t)
	defer srv.Resume(t)
	for _, tc := range []struct {
		name string
		opts []pubsub.SubscribeOption
	}{
		{"Group", []pubsub.SubscribeOption{pubsub.Group("g")}},
		{"FanOutLatest", []pubsub.SubscribeOption{pubsub.StartFrom(pubsub.Latest)}}, // reads the stream's last ID
	} {
		cctx, cancel := context.WithCancel(ctx)
		time.AfterFunc(200*time.Millisecond, cancel)
		start := time.Now()
		_, err = b.Subscribe(cctx, "stalled-"+tc.name, nop, tc.opts...)
		d := time.Since(start)
		t.Logf("%s: Subscribe returned %v after %v", tc.name, err, d.Round(time.Millisecond))
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s: Subscribe on a stalled server, ctx cancelled: %v, want an error wrapping context.Canceled", tc.name, err)
		}
		if d > 1200*time.Millisecond {
			t.Errorf("%s: Subscribe returned %v after its start, %v after the cancel; want within 1s of it", tc.name, d.Round(time.Millisecond), (d - 200*time.Millisecond).Round(time.Millisecond))
		}
	}
}
