package signals_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasebus/leasebus/inmem"
	"github.com/leasebus/leasebus/signals"
)

// TestTakeoverAtLeaseLapse: a signal forwarded to a holder that stops
// renewing runs as soon as the holder's lease lapses, not when its wake
// notice comes back after the recovery interval (lapse.go). The holder is
// a "ghost": a lease taken with the provider directly (600ms, renewed
// every 150ms while it lives), as a process that died mid-run leaves one.
// The recovery interval is 30s, so without the lapse watch the signal ran
// only after 30s (the notice's next try). While the ghost renews, the
// runtime's tries find it held and do not take it; once the ghost stops,
// the signal runs within the 600ms TTL and a margin; the watch is empty
// afterwards.
//
// NothingWaits: a ghost that renews for good and a notice whose signal is
// in no inbox (as stale as TestStaleNoticeAcked's): the notice's try notes
// the thread, and the watch forgets it at the ghost's lapse time, when the
// inbox shows nothing waiting, while the ghost still holds it; nothing
// runs.
func TestTakeoverAtLeaseLapse(t *testing.T) {
	t.Parallel() // mostly waits (TTLs, windows, a stalled server): beside another (CI time)
	for _, tc := range []struct {
		name  string
		lives time.Duration // how long the ghost renews
		ttl   time.Duration // the runtime's lease TTL
	}{
		{"GhostDies", 1500 * time.Millisecond, 15 * time.Second},
		{"NothingWaits", time.Hour, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const thread = "lapse"
			b := inmem.New()
			t.Cleanup(func() { b.Close() })
			ctx := t.Context()
			key, ghost := signals.LeaseKey(thread), "ghost/run1"
			if r, err := b.AcquireLease(ctx, key, ghost, 600*time.Millisecond); err != nil || !r.Acquired {
				t.Fatalf("ghost acquire: %+v, %v", r, err)
			}
			var died atomic.Int64 // unix nanos when the ghost stopped renewing
			gctx, stop := context.WithCancel(ctx)
			t.Cleanup(stop)
			go func() {
				tick := time.NewTicker(150 * time.Millisecond)
				defer tick.Stop()
				end := time.After(tc.lives)
				for {
					select {
					case <-gctx.Done():
						return
					case <-end:
						died.Store(time.Now().UnixNano())
						return
					case <-tick.C:
						_, _ = b.RenewLease(gctx, key, ghost, 600*time.Millisecond)
					}
				}
			}()
			ran := make(chan time.Time, 1)
			rt := newRuntime(t, b, func(ctx context.Context, run *signals.Run) error {
				ran <- time.Now()
				return nil
			}, signals.WithLeaseTTL(tc.ttl), signals.WithRecoveryInterval(30*time.Second))
			if tc.lives == time.Hour {
				if err := b.Publish(ctx, signals.WorkTopic, signals.WakeNotice(thread, "gone")); err != nil {
					t.Fatal(err)
				}
				deadline := time.Now().Add(5 * time.Second)
				for signals.LapseEntries(rt) == 0 {
					if time.Now().After(deadline) {
						t.Fatal("the notice's try of a held thread left no lapse watch entry within 5s")
					}
					time.Sleep(5 * time.Millisecond)
				}
				deadline = time.Now().Add(10 * time.Second)
				for signals.LapseEntries(rt) != 0 {
					if time.Now().After(deadline) {
						t.Fatalf("lapse watch still holds %d entries 10s after the stale notice's try (the ghost's lease: 600ms)", signals.LapseEntries(rt))
					}
					time.Sleep(20 * time.Millisecond)
				}
				select {
				case at := <-ran:
					t.Fatalf("ran at %v while the ghost held the thread", at)
				default:
				}
				return
			}
			acc, err := rt.Send(ctx, thread, sig("s1"))
			if err != nil || acc.Action != signals.Forwarded || acc.Owner != ghost {
				t.Fatalf("send: %+v, %v; want Forwarded to %s", acc, err, ghost)
			}
			select {
			case at := <-ran:
				d := died.Load()
				if d == 0 || at.UnixNano() < d {
					t.Fatalf("ran while the ghost still renewed its lease")
				}
				after := at.Sub(time.Unix(0, d))
				t.Logf("ran %v after the ghost stopped renewing (its lease: 600ms)", after.Round(time.Millisecond))
				if after > 3*time.Second {
					t.Fatalf("ran %v after the ghost stopped renewing, want within its 600ms lease + 2.4s", after)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("not run 10s after the send (ghost renews for 1.5s, lease 600ms; recovery interval 30s)")
			}
			deadline := time.Now().Add(5 * time.Second)
			for signals.LapseEntries(rt) != 0 {
				if time.Now().After(deadline) {
					t.Fatalf("lapse watch holds %d entries after the takeover", signals.LapseEntries(rt))
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}
