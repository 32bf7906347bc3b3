package signals_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasebus/leasebus/signals"
)

// TestDuplicateSendNotLeftUnread: a Send retried with the same ID while the
// first copy runs, or after it ran (both Sends return nil, milliseconds
// apart, well within the dedupe window), does not run a second time, also
// when the tenure then ends with Close (which does not look at the inbox
// again, afterRelease) and the next tenure comes after the dedupe window.
// Found by review 15: with e73bc92's kicks marked by signal ID, the
// duplicate's kicks were skipped (the tenure held or had run that ID), the
// copy stayed unread, and the next tenure, past the window, ran it again
// (3 of 3 runs, both cases); the marks are now per copy (its notice's ID).
func TestDuplicateSendNotLeftUnread(t *testing.T) {
	t.Parallel() // mostly waits (TTLs, windows, a stalled server): beside another (CI time)
	for _, during := range []bool{true, false} {
		name := "AfterRun" // kick skipped: the tenure ran x (seen)
		if during {
			name = "DuringRun" // kick skipped: the tenure's handler holds x (reading)
		}
		t.Run(name, func(t *testing.T) { dupLeftUnread(t, during) })
	}
}

func dupLeftUnread(t *testing.T, during bool) {
	srv, _ := startRedis(t)
	ctx := context.Background()
	var mu sync.Mutex
	var ran []string
	running := make(chan struct{}, 8)
	gate := make(chan struct{})
	var once sync.Once
	agent := func(ctx context.Context, run *signals.Run) error {
		return eachSignal(ctx, run, func(s signals.Signal) {
			mu.Lock()
			ran = append(ran, s.ID)
			mu.Unlock()
			running <- struct{}{}
			once.Do(func() { <-gate })
		})
	}
	newRT := func(id string) (*signals.Runtime, func()) {
		return urlRuntime(t, srv.URL(), "dw", id, agent, nil, signals.WithLinger(time.Minute), signals.WithDedupeWindow(time.Second))
	}
	a, stopA := newRT("A")
	if _, err := a.Send(ctx, "th", signals.Signal{ID: "x", Type: "msg"}); err != nil {
		t.Fatal(err)
	}
	<-running
	if !during {
		close(gate)
		time.Sleep(300 * time.Millisecond) // x ran and was acked
	}
	// The sender retries with the same ID (say its first call timed out).
	if _, err := a.Send(ctx, "th", signals.Signal{ID: "x", Type: "msg"}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if during {
		close(gate)
	}
	time.Sleep(300 * time.Millisecond) // x's run ends; its duplicate is settled
	stopA()
	time.Sleep(2500 * time.Millisecond) // past the dedupe window
	b, _ := newRT("B")
	if _, err := b.Send(ctx, "th", signals.Signal{ID: "y", Type: "msg"}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	mu.Lock()
	defer mu.Unlock()
	t.Logf("runs: %v", ran)
	n := 0
	for _, id := range ran {
		if id == "x" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("x, sent twice within milliseconds, ran %d times (runs %v)", n, ran)
	}
}

// TestDuplicateSendReadByItsTenure: a Send retried with the same ID while
// the first copy runs is a duplicate, read and acked unrun by the tenure
// that ran the first copy, not left in the inbox for a Recovered tenure
// after the release (review 15: 1 extra tenure, 3 of 3 runs, with kicks
// marked by signal ID).
func TestDuplicateSendReadByItsTenure(t *testing.T) {
	t.Parallel() // mostly waits (TTLs, windows, a stalled server): beside another (CI time)
	srv, _ := startRedis(t)
	ctx := context.Background()
	running := make(chan struct{}, 4)
	gate := make(chan struct{})
	var once sync.Once
	var runs atomic.Int32
	agent := func(ctx context.Context, run *signals.Run) error {
		return eachSignal(ctx, run, func(s signals.Signal) {
			runs.Add(1)
			running <- struct{}{}
			once.Do(func() { <-gate })
		})
	}
	var tenures, recovered, skipped atomic.Int32
	rt, _ := urlRuntime(t, srv.URL(), "dt2", "A", agent, nil, signals.WithLinger(300*time.Millisecond),
		signals.WithObserver(func(e signals.Event) {
			switch e.Kind {
			case signals.TenureStarted:
				tenures.Add(1)
			case signals.Recovered:
				recovered.Add(1)
			case signals.SignalSkipped:
				skipped.Add(1)
			}
		}))
	if _, err := rt.Send(ctx, "th", signals.Signal{ID: "x", Type: "msg"}); err != nil {
		t.Fatal(err)
	}
	<-running
	acc, err := rt.Send(ctx, "th", signals.Signal{ID: "x", Type: "msg"})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // its notice's watch and handler come and go
	close(gate)
	time.Sleep(3 * time.Second)
	t.Logf("second Send %v; runs %d, tenures %d, recovered %d, skipped %d", acc.Action, runs.Load(), tenures.Load(), recovered.Load(), skipped.Load())
	if runs.Load() != 1 {
		t.Errorf("x ran %d times", runs.Load())
	}
	if n := tenures.Load() + recovered.Load(); n != 1 {
		t.Errorf("%d tenures (%d recovered) for one signal and its duplicate, want 1", n, recovered.Load())
	}
}
