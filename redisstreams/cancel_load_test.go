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

	"github.com/redis/go-redis/v9"

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
	n, d := ctxEndsUnderStall(t, deadline, false, 32, "runLease", leaseCycle)
	t.Logf("%d cycles before the stall; last caller returned %v after the ctx ended", n, d.Round(time.Millisecond))
	if d > time.Second {
		t.Errorf("a lease call returned %v after its ctx ended on a stalled server, want within 1s", d.Round(time.Millisecond))
	}
}

// TestCancelledCallsBesideBackgroundOnStalledServer: as
// TestCancelledCallsUnderLoadOnStalledServer, but half the callers run on
// context.Background, so that a leader whose ctx cannot end (it sends
// inline) hands the queue on to a caller whose ctx can: that caller must
// still return at its ctx's end (runLease and publishUnit, the branch for a
// batch handed to lead). The client has a 5s ReadTimeout and no retries, so
// that the callers on context.Background come back 5s into the stall.
func TestCancelledCallsBesideBackgroundOnStalledServer(t *testing.T) {
	for _, tc := range []struct {
		name, stuckIn string
		op            func(b *Backend, ctx context.Context, i int) error
	}{
		{"Lease", "runLease", leaseCycle},
		{"Publish", "publishUnit", func(b *Backend, ctx context.Context, i int) error {
			return b.Publish(ctx, fmt.Sprintf("pl%d", i%4), pubsub.Event{Type: "x", Data: []byte("d")})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, d := ctxEndsUnderStall(t, false, true, 32, tc.stuckIn, tc.op)
			t.Logf("%d ops before the stall; the last caller on the cancelled ctx returned %v after the cancel", n, d.Round(time.Millisecond))
			if d > time.Second {
				t.Errorf("a call returned %v after its ctx was cancelled on a stalled server, want within 1s", d.Round(time.Millisecond))
			}
		})
	}
}

// leaseCycle acquires and releases caller i's own lease.
func leaseCycle(b *Backend, ctx context.Context, i int) error {
	key, owner := fmt.Sprintf("k%d", i), fmt.Sprintf("o%d", i)
	if _, err := b.AcquireLease(ctx, key, owner, time.Minute); err != nil {
		return err
	}
	return b.ReleaseLease(ctx, key, owner)
}

// ctxEndsUnderStall runs op in a loop from callers goroutines (i is the
// caller's number) on one ctx, against a Backend from NewURL (go-redis
// defaults) on a server of its own; 500ms in, it stops the server (SIGSTOP),
// and 200ms later it cancels the ctx (or, with deadline, lets the ctx reach
// its deadline then). It returns how many ops succeeded and how long after
// the ctx ended the last caller on that ctx returned. With mixed, the
// callers with an even i run on context.Background instead, on a client
// with a 5s ReadTimeout and no retries (they come back 5s into the stall).
// A caller still in a frame named stuckIn 2s after the ctx ended is logged
// with its stack.
func ctxEndsUnderStall(t *testing.T, deadline, mixed bool, callers int, stuckIn string, op func(b *Backend, ctx context.Context, i int) error) (int, time.Duration) {
	t.Helper()
	redistest.Require(t)
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	var b *Backend
	var err error
	if mixed {
		b, err = NewURL(ctx, srv.URL(), Options{Prefix: psPrefix(), ConfigureClient: func(o *redis.Options) {
			o.ReadTimeout, o.MaxRetries = 5*time.Second, -1
		}})
	} else {
		b, err = NewURL(ctx, srv.URL(), Options{Prefix: psPrefix()})
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })

	cctx, cancel := context.WithCancel(ctx)
	if deadline {
		cctx, cancel = context.WithTimeout(ctx, 700*time.Millisecond) // 500ms of load + 200ms of stall
	}
	defer cancel()
	var (
		wg                      sync.WaitGroup
		mu                      sync.Mutex
		lastReturn, cancelledAt time.Time
		ops                     int
	)
	for i := range callers {
		wg.Go(func() {
			octx := cctx
			background := mixed && i%2 == 0
			if background {
				octx = context.Background()
			}
			n := 0
			for cctx.Err() == nil && op(b, octx, i) == nil {
				n++
			}
			now := time.Now()
			mu.Lock()
			ops += n
			if !background && now.After(lastReturn) {
				lastReturn = now
			}
			mu.Unlock()
		})
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
	if deadline {
		<-cctx.Done()
	}
	mu.Lock()
	cancelledAt = time.Now()
	mu.Unlock()
	cancel()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		if mixed {
			break // the callers on context.Background are still in their calls
		}
		buf := make([]byte, 1<<20)
		n := runtime.Stack(buf, true)
		for _, g := range strings.Split(string(buf[:n]), "\n\n") {
			if strings.Contains(g, "ctxEndsUnderStall") && strings.Contains(g, stuckIn) {
				t.Logf("a caller still in %s 2s after the ctx ended:\n%s", stuckIn, g)
				break
			}
		}
	}
	select {
	case <-done:
	case <-time.After(90 * time.Second):
		t.Fatal("callers still running 90s after the ctx ended")
	}
	srv.Resume(t)
	resumed = true
	mu.Lock()
	defer mu.Unlock()
	return ops, lastReturn.Sub(cancelledAt)
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
	b := urlBackend(t, srv.URL(), Options{})
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
		_, err := b.Subscribe(cctx, "stalled-"+tc.name, nop, tc.opts...)
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
