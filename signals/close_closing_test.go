package signals_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasebus/leasebus/signals"
)

// TestCloseClosingEventOrdersRuns: Close on a runtime busy with short runs
// on 40 threads while Sends keep coming. The Closing event is emitted once,
// and no RunStarted event has a Time after its Time; every agent call was
// preceded by its RunStarted event. Before the Closing event (and the
// RunStarted event's Time taken where the runtime commits to a run) a test
// could only compare the agent's own clock with the moment it called
// Close, and a run committed to just before Close reached the agent after
// it: CI saw "run … on D started 2ms after D's Close began"
// (TestClusterStalledMasterUnderLoad).
func TestCloseClosingEventOrdersRuns(t *testing.T) {
	for round := range 10 {
		t.Run(fmt.Sprint(round), func(t *testing.T) {
			ps := newBackend(t)
			var (
				mu       sync.Mutex
				started  = map[string]time.Time{} // RunStarted Time per run ID
				closings []time.Time
				unseen   atomic.Int64 // agent calls whose RunStarted event had not been seen
				calls    atomic.Int64
			)
			rt, err := signals.New(ps, func(ctx context.Context, r *signals.Run) error {
				calls.Add(1)
				mu.Lock()
				_, ok := started[r.ID]
				mu.Unlock()
				if !ok {
					unseen.Add(1)
				}
				time.Sleep(time.Duration(round%3) * time.Millisecond)
				return nil
			}, signals.WithLeaseTTL(2*time.Second), signals.WithLinger(20*time.Millisecond),
				signals.WithRecoveryInterval(100*time.Millisecond),
				signals.WithObserver(func(e signals.Event) {
					mu.Lock()
					defer mu.Unlock()
					switch e.Kind {
					case signals.RunStarted:
						started[e.RunID] = e.Time
					case signals.Closing:
						closings = append(closings, e.Time)
					}
				}))
			if err != nil {
				t.Fatal(err)
			}
			ctx := t.Context()
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for s := range 4 {
				wg.Go(func() {
					for i := 0; ; i++ {
						select {
						case <-stop:
							return
						default:
						}
						if _, err := rt.Send(ctx, fmt.Sprint("t", (i*4+s)%40), signals.Signal{Type: "msg"}); err != nil {
							return // ErrClosed once Close began
						}
					}
				})
			}
			for calls.Load() < 200 {
				time.Sleep(time.Millisecond)
			}
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err = rt.Close(cctx)
			cancel()
			close(stop)
			wg.Wait()
			if err != nil {
				t.Fatalf("Close: %v", err)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(closings) != 1 {
				t.Fatalf("%d Closing events, want 1", len(closings))
			}
			late := 0
			for id, at := range started {
				if at.After(closings[0]) {
					late++
					if late <= 5 {
						t.Errorf("run %s: RunStarted at %v after the Closing event", id, at.Sub(closings[0]))
					}
				}
			}
			if n := unseen.Load(); n != 0 {
				t.Errorf("%d agent calls before their RunStarted event", n)
			}
			if int64(len(started)) != calls.Load() {
				t.Errorf("%d RunStarted events, %d agent calls", len(started), calls.Load())
			}
		})
	}
}

// TestCloseFromClosingObserver: an observer that calls Close (and Status)
// when it sees the Closing event does not deadlock Close: the event is
// emitted outside Close's once-only section. Review of 6b17280: emitted
// inside it, the observer's Close waited on that section forever.
func TestCloseFromClosingObserver(t *testing.T) {
	ps := newBackend(t)
	var rt *signals.Runtime
	inner := make(chan error, 1)
	rt, err := signals.New(ps, func(ctx context.Context, r *signals.Run) error { return nil },
		signals.WithLeaseTTL(2*time.Second), signals.WithLinger(20*time.Millisecond),
		signals.WithObserver(func(e signals.Event) {
			if e.Kind == signals.Closing {
				_, _ = rt.Status(context.Background(), "t")
				inner <- rt.Close(context.Background())
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Send(t.Context(), "t", signals.Signal{Type: "msg"}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- rt.Close(context.Background()) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Close did not return within 20s: the observer's Close deadlocked it")
	}
	if err := <-inner; err != nil {
		t.Fatalf("the observer's Close: %v", err)
	}
}
