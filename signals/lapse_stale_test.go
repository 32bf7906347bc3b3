package signals_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

// TestLapseStaleNoticeHeldThread: TestStaleNoticeAcked's promise (a notice
// whose signal can never show done is acked after at most one recovered
// tenure) when another holder holds the thread while the notice is
// handled. The handler's tries find it held and note the lapse (lapse.go);
// the holder releases; the handler's next try takes the thread (Recovered
// #1), which drains the inbox and settles the notice. Found by review
// (helper 3, 2026-11-27): the lapse watch then came due at the old lapse
// time, checked only the notice's signal (not done), found the lease free
// and started Recovered #2 for nothing (3 of 3). Now it looks at the inbox
// first, and nothing waits there.
func TestLapseStaleNoticeHeldThread(t *testing.T) {
	t.Parallel() // mostly waits (TTLs, windows, a stalled server): beside another (CI time)
	srv, _ := startRedis(t)
	ctx := context.Background()
	b, err := redisstreams.NewURL(ctx, srv.URL(), redisstreams.Options{Prefix: "stale2"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	const thread = "st"
	key, ghost := signals.LeaseKey(thread), "ghost/run1"
	const gttl = 2 * time.Second
	if r, err := b.AcquireLease(ctx, key, ghost, gttl); err != nil || !r.Acquired {
		t.Fatalf("ghost acquire: %+v, %v", r, err)
	}
	gctx, stop := context.WithCancel(ctx)
	var gwg sync.WaitGroup
	gwg.Add(1)
	go func() { // renews until it releases, after 1s
		defer gwg.Done()
		tick := time.NewTicker(300 * time.Millisecond)
		defer tick.Stop()
		end := time.After(time.Second)
		for {
			select {
			case <-gctx.Done():
				return
			case <-end:
				_ = b.ReleaseLease(ctx, key, ghost)
				return
			case <-tick.C:
				_, _ = b.RenewLease(gctx, key, ghost, gttl)
			}
		}
	}()
	t.Cleanup(func() { stop(); gwg.Wait() })
	var (
		runs      atomic.Int64
		mu        sync.Mutex
		recovered []time.Time
	)
	agent := func(ctx context.Context, run *signals.Run) error {
		runs.Add(int64(len(run.Signals)))
		return nil
	}
	start := time.Now()
	newRuntime(t, b, agent, signals.WithLeaseTTL(2*time.Second), signals.WithLinger(50*time.Millisecond),
		signals.WithRecoveryInterval(100*time.Millisecond), signals.WithDedupeWindow(time.Second),
		signals.WithObserver(func(e signals.Event) {
			if e.Kind == signals.Recovered {
				mu.Lock()
				recovered = append(recovered, e.Time)
				mu.Unlock()
			}
		}))
	// A notice whose signal is in no inbox and no done record: as stale as
	// TestStaleNoticeAcked's (a signal that left the record).
	if err := b.Publish(ctx, signals.WorkTopic, signals.WakeNotice(thread, "x")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the stale notice acked", func() bool {
		bl, err := b.GroupBacklog(ctx, signals.WorkTopic, signals.WorkGroup)
		return err == nil && bl.Pending == 0 && bl.Lag == 0
	})
	time.Sleep(4 * time.Second) // past the lapse the handler's tries noted (<= 1s + 2s)
	mu.Lock()
	defer mu.Unlock()
	for i, at := range recovered {
		t.Logf("recovered tenure %d at +%v", i+1, at.Sub(start).Round(time.Millisecond))
	}
	if len(recovered) > 1 {
		t.Fatalf("%d recovered tenures for one stale notice, want at most 1", len(recovered))
	}
	if r := runs.Load(); r != 0 {
		t.Fatalf("ran %d signals, want none", r)
	}
}
