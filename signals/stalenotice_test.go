package signals_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasebus/leasebus/pubsub"
	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

// TestStaleNoticeAcked replays the wake notice of a signal that ran long
// enough ago to have left the done record (dedupe window 1s): such a notice
// can never see its signal done. It must be acked after one recovered
// tenure that drains the (empty) inbox, and the signal must not run again.
func TestStaleNoticeAcked(t *testing.T) {
	t.Parallel() // mostly waits (TTLs, windows, a stalled server): beside another (CI time)
	srv, _ := startRedis(t)
	ctx := context.Background()
	b, err := redisstreams.NewURL(ctx, srv.URL(), redisstreams.Options{Prefix: "stale"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	var (
		runs      atomic.Int64
		mu        sync.Mutex
		recovered int
	)
	agent := func(ctx context.Context, run *signals.Run) error {
		runs.Add(int64(len(run.Signals)))
		return nil
	}
	opts := []signals.Option{signals.WithLeaseTTL(2 * time.Second), signals.WithLinger(50 * time.Millisecond),
		signals.WithRecoveryInterval(100 * time.Millisecond), signals.WithDedupeWindow(time.Second)}
	rtA, err := signals.New(b, agent, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rtA.Send(ctx, "st", signals.Signal{ID: "x", Type: "msg"}); err != nil {
		t.Fatal(err)
	}
	pendingIs0 := func() bool {
		bl, err := b.GroupBacklog(ctx, signals.WorkTopic, signals.WorkGroup)
		if err != nil {
			t.Fatal(err)
		}
		return bl.Pending == 0 && bl.Lag == 0
	}
	waitFor(t, 10*time.Second, "x ran and its notice was acked", func() bool { return runs.Load() == 1 && pendingIs0() })
	// A's process-local cache of done signals would answer for x: B, a
	// runtime of its own, has only the shared done record to go by.
	if err := rtA.Close(ctx); err != nil {
		t.Fatal(err)
	}
	b2, err := redisstreams.NewURL(ctx, srv.URL(), redisstreams.Options{Prefix: "stale"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b2.Close() })
	newRuntime(t, b2, agent, append(opts, signals.WithObserver(func(e signals.Event) {
		if e.Kind == signals.Recovered {
			mu.Lock()
			recovered++
			mu.Unlock()
		}
	}))...)
	time.Sleep(2 * time.Second) // past the dedupe window: x left the done record

	if err := b2.Publish(ctx, signals.WorkTopic, signals.WakeNotice("st", "x")); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	waitFor(t, 10*time.Second, "the stale notice acked", func() bool { return pendingIs0() })
	mu.Lock()
	n := recovered
	mu.Unlock()
	t.Logf("stale notice acked %v after it was published, after %d recovered tenure(s)", time.Since(start).Round(time.Millisecond), n)
	if n > 1 {
		t.Fatalf("%d recovered tenures for one stale notice, want at most 1", n)
	}
	if r := runs.Load(); r != 1 {
		t.Fatalf("x ran %d times, want once", r)
	}
}

func waitFor(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

var _ pubsub.BacklogReader = (*redisstreams.Backend)(nil)
