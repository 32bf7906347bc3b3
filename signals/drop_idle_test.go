package signals_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

// TestDropQueuedOnIdleThreadLeavesNothing: Cancel(DropQueued) publishes its
// drop mark into the thread's inbox before it reads the owner. Found by
// review: when nobody held the thread, no tenure ever read the mark and the
// inbox stream stayed forever, against "after the longest of those an idle
// thread leaves nothing". The mark now has a wake notice: a runtime reads
// it, and the drained inbox is deleted.
func TestDropQueuedOnIdleThreadLeavesNothing(t *testing.T) {
	t.Parallel() // mostly waits (TTLs, windows, a stalled server): beside another (CI time)
	srv, c := startRedis(t)
	ctx := context.Background()
	b, err := redisstreams.NewURL(ctx, srv.URL(), redisstreams.Options{Prefix: "fp", FenceIdle: time.Second, LeaseStatusWindow: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	ran := make(chan string, 4)
	rt := newRuntime(t, b, func(ctx context.Context, run *signals.Run) error {
		ran <- run.Signals[0].ID
		return nil
	}, signals.WithDedupeWindow(time.Second), signals.WithLinger(time.Millisecond))
	if _, err := rt.Send(ctx, "t", sig("s1")); err != nil {
		t.Fatal(err)
	}
	<-ran
	for {
		st, err := rt.Status(ctx, "t")
		if err != nil {
			t.Fatal(err)
		}
		if st.Owner == "" {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	res, err := rt.Cancel(ctx, "t", "stop", signals.DropQueued())
	t.Logf("Cancel on idle thread: %+v, %v", res, err)
	k0, _ := c.Keys(ctx, "fp:*").Result()
	t.Logf("keys right after Cancel: %q", k0)
	idle := time.Now()
	var keys []string
	for time.Since(idle) < 10*time.Second {
		keys, err = c.Keys(ctx, "fp:*").Result()
		if err != nil {
			t.Fatal(err)
		}
		if onlyFootprint(keys, 1) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	slices.Sort(keys)
	t.Fatalf("%d keys under the prefix 10s after the thread went idle (windows 1s), want only the work and control topics (and the runtime's read guard): %q", len(keys), keys)
}
