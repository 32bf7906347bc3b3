package lifecycle

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestShutdownRunsDrainOnceAfterCalls(t *testing.T) {
	var c Closer
	if c.Closed() || !c.Enter() {
		t.Fatal("a new Closer is closed")
	}
	var runs int
	var mu sync.Mutex
	left := false
	drain := func(<-chan struct{}) error {
		mu.Lock()
		defer mu.Unlock()
		runs++
		if !left {
			t.Error("drain ran before the call in progress left")
		}
		return errors.New("drain failed")
	}
	errs := make(chan error, 3)
	for range 3 {
		go func() { errs <- c.Shutdown(context.Background(), drain) }()
	}
	for !c.Closed() {
		time.Sleep(time.Millisecond)
	}
	if c.Enter() {
		t.Fatal("Enter succeeded after Shutdown began")
	}
	mu.Lock()
	left = true
	mu.Unlock()
	c.Leave()
	var failed int
	for range 3 {
		if err := <-errs; err != nil {
			failed++
		}
	}
	if runs != 1 || failed != 1 {
		t.Errorf("drain ran %d times and %d callers got its error, want 1 and 1", runs, failed)
	}
}

func TestShutdownCtxAborts(t *testing.T) {
	var c Closer
	release := make(chan struct{})
	aborted := make(chan struct{})
	drain := func(abort <-chan struct{}) error {
		<-abort
		close(aborted)
		<-release // what drain waits for after abort (a straggler)
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := c.Shutdown(ctx, drain); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown = %v, want context.DeadlineExceeded", err)
	}
	<-aborted
	waited := make(chan error)
	go func() { waited <- c.Shutdown(context.Background(), drain) }()
	select {
	case err := <-waited:
		t.Fatalf("a later Shutdown returned %v before the drain finished", err)
	case <-time.After(20 * time.Millisecond):
	}
	close(release)
	if err := <-waited; err != nil {
		t.Errorf("later Shutdown = %v, want nil", err)
	}
	c.Wait()
}
