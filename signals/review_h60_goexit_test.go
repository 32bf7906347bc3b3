package signals_test

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/leasebus/leasebus/signals"
)

// TestReviewH60AgentExitAfterNext: an agent that took a follow-up with
// Run.Next and then panics or ends its goroutine ends its run with an
// error; both signals count as used (signals.Agent): neither runs again,
// and the thread's next signal starts the next run (review h60).
func TestReviewH60AgentExitAfterNext(t *testing.T) {
	for _, mode := range []string{"Goexit", "Panic"} {
		t.Run(mode, func(t *testing.T) {
			b := newBackend(t)
			var mu sync.Mutex
			var seen []string
			took := make(chan struct{})
			sentB := make(chan struct{})
			ended := make(chan error, 10)
			rt := newRuntime(t, b, func(ctx context.Context, run *signals.Run) error {
				mu.Lock()
				for _, s := range run.Signals {
					seen = append(seen, s.ID)
				}
				first := len(seen) == 1
				mu.Unlock()
				if !first {
					return nil
				}
				close(took)
				<-sentB
				s, ok := run.Next(ctx)
				if !ok {
					t.Error("Next gave nothing")
					return nil
				}
				mu.Lock()
				seen = append(seen, s.ID)
				mu.Unlock()
				if mode == "Panic" {
					panic("boom")
				}
				runtime.Goexit()
				return nil
			}, signals.WithNextWait(5*time.Second), signals.WithObserver(func(e signals.Event) {
				if e.Kind == signals.RunEnded {
					ended <- e.Err
				}
			}))
			if _, err := rt.Send(t.Context(), "t", sig("a")); err != nil {
				t.Fatal(err)
			}
			<-took
			if _, err := rt.Send(t.Context(), "t", sig("b")); err != nil {
				t.Fatal(err)
			}
			close(sentB)
			select {
			case err := <-ended:
				if err == nil {
					t.Errorf("run 1 ended without an error")
				}
			case <-time.After(30 * time.Second):
				t.Fatal("run 1 never ended")
			}
			if _, err := rt.Send(t.Context(), "t", sig("c")); err != nil {
				t.Fatal(err)
			}
			select {
			case <-ended:
			case <-time.After(30 * time.Second):
				t.Fatal("run 2 never ended")
			}
			time.Sleep(300 * time.Millisecond) // room for a redelivery (recovery 100ms)
			mu.Lock()
			defer mu.Unlock()
			if got := len(seen); got != 3 || seen[0] != "a" || seen[1] != "b" || seen[2] != "c" {
				t.Errorf("signals seen %v, want [a b c]", seen)
			}
		})
	}
}

// TestReviewH60AgentExitAsCloseGivesUp: an agent that ends its goroutine
// once Close(ctx) gave up and cancelled it ends its run; Close returns and
// nothing is left running (goleak in TestMain) (review h60).
func TestReviewH60AgentExitAsCloseGivesUp(t *testing.T) {
	b := newBackend(t)
	started := make(chan struct{})
	rt, err := signals.New(b, func(ctx context.Context, run *signals.Run) error {
		close(started)
		<-ctx.Done()
		runtime.Goexit()
		return nil
	}, signals.WithLeaseTTL(2*time.Second), signals.WithLinger(50*time.Millisecond), signals.WithRecoveryInterval(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Send(t.Context(), "t", sig("a")); err != nil {
		t.Fatal(err)
	}
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- rt.Close(ctx) }()
	select {
	case err := <-done:
		if err != nil && err != context.DeadlineExceeded {
			t.Errorf("Close: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Close hung")
	}
	if err := rt.Close(context.Background()); err != nil && err != context.DeadlineExceeded {
		t.Errorf("second Close: %v", err)
	}
}

// TestReviewH60AgentExitAfterLeaseLost: an agent that ends its goroutine
// (or panics) once its lease was revoked leaves its signal unfinished, as
// one returning ctx.Err() does: the next run gets it again, marked
// redelivered (review h60).
func TestReviewH60AgentExitAfterLeaseLost(t *testing.T) {
	for _, mode := range []string{"Return", "Goexit", "Panic"} {
		t.Run(mode, func(t *testing.T) {
			b := newBackend(t)
			started := make(chan struct{}, 1)
			type got struct {
				id          string
				redelivered bool
			}
			runs := make(chan got, 10)
			var first sync.Once
			rt := newRuntime(t, b, func(ctx context.Context, run *signals.Run) error {
				runs <- got{run.Signals[0].ID, run.Redelivered[0]}
				isFirst := false
				first.Do(func() { isFirst = true })
				if !isFirst {
					return nil
				}
				started <- struct{}{}
				<-ctx.Done()
				switch mode {
				case "Goexit":
					runtime.Goexit()
				case "Panic":
					panic("lost")
				}
				return ctx.Err()
			})
			if _, err := rt.Send(t.Context(), "t", sig("a")); err != nil {
				t.Fatal(err)
			}
			<-started
			<-runs
			if err := b.RevokeLease(t.Context(), signals.LeaseKey("t"), "review h60"); err != nil {
				t.Fatal(err)
			}
			select {
			case g := <-runs:
				if g.id != "a" || !g.redelivered {
					t.Errorf("next run got %s (redelivered %v), want a redelivered", g.id, g.redelivered)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("signal a never ran again after its run lost the lease")
			}
		})
	}
}
