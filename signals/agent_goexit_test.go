package signals_test

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasebus/leasebus/signals"
)

// An agent that ends its goroutine instead of returning (runtime.Goexit, as
// testing's FailNow does when an agent under test calls it) ends its run as
// a panic does: the run ends with an error, the thread's next signal runs,
// and Close returns, and the run's signals count as used. Before, the
// session's goroutine died in the agent: the run never ended (no RunEnded),
// its cleanup released the lease, and a recovered tenure ran the same
// signal again, whose success was the first RunEnded seen.
func TestAgentGoexitEndsItsRun(t *testing.T) {
	b := newBackend(t)
	var calls atomic.Int32
	ran := make(chan int32, 10)
	var second atomic.Value
	ended := make(chan error, 10)
	rt := newRuntime(t, b, func(ctx context.Context, run *signals.Run) error {
		n := calls.Add(1)
		if n == 2 {
			second.Store(run.Signals[0].ID)
		}
		ran <- n
		if n == 1 {
			runtime.Goexit()
		}
		return nil
	}, signals.WithObserver(func(e signals.Event) {
		if e.Kind == signals.RunEnded {
			ended <- e.Err
		}
	}))
	if _, err := rt.Send(t.Context(), "t", sig("a")); err != nil {
		t.Fatal(err)
	}
	waitRun := func(want int32) {
		t.Helper()
		select {
		case n := <-ran:
			if n != want {
				t.Fatalf("run %d, want %d", n, want)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("run %d never started", want)
		}
	}
	waitRun(1)
	select {
	case err := <-ended:
		if err == nil {
			t.Fatal("the run whose agent called runtime.Goexit ended without an error")
		}
		t.Logf("run 1 ended: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the run whose agent called runtime.Goexit never ended")
	}
	if _, err := rt.Send(t.Context(), "t", sig("b")); err != nil {
		t.Fatal(err)
	}
	waitRun(2)
	if id := second.Load(); id != "b" {
		t.Errorf("run 2 started with signal %v, want b (a ran in run 1)", id)
	}
	closed := make(chan error, 1)
	go func() { closed <- rt.Close(context.Background()) }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Close did not return within 30s")
	}
}
