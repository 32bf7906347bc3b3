package signals_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leasebus/leasebus/signals"
)

// TestSendReturnsAtCtxEndOnStalledServer: Send returns when its ctx ends,
// also while Redis has stopped answering (SIGSTOP), on a NewURL client
// with go-redis's defaults: to a thread nobody holds (its acquire is in
// flight when ctx ends), to a thread this process holds (only its publish
// is), and with 20 such Sends at once. Each must return within 1s of the
// start of its 300ms ctx, with an error. Once the server answers again,
// the threads whose acquire went on after its Send gave up are not left
// leased to a run that never starts: a new signal to each runs within 5s
// (the lease TTL is the default 15s), and retrying a signal that gave up
// runs it once.
func TestSendReturnsAtCtxEndOnStalledServer(t *testing.T) {
	srv, _ := startRedis(t)
	ctx := context.Background()
	var (
		mu   sync.Mutex
		ran  = map[string]int{}
		hold = make(chan struct{})
	)
	agent := func(ctx context.Context, r *signals.Run) error {
		take := func(s signals.Signal) {
			mu.Lock()
			ran[s.ID]++
			mu.Unlock()
		}
		for _, s := range r.Signals {
			take(s)
		}
		if r.Thread == "held" {
			select {
			case <-hold:
			case <-ctx.Done():
			}
		}
		for {
			s, ok := r.Next(ctx)
			if !ok {
				return nil
			}
			take(s)
		}
	}
	rt, _ := urlRuntime(t, srv.URL(), "sendstall", "A", agent, nil)
	runsOf := func(id string) int {
		mu.Lock()
		defer mu.Unlock()
		return ran[id]
	}
	awaitRun := func(id string, within time.Duration) {
		t.Helper()
		for deadline := time.Now().Add(within); runsOf(id) == 0; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("signal %s did not run within %v", id, within)
			}
		}
	}
	if acc, err := rt.Send(ctx, "held", signals.Signal{ID: "held-0", Type: "t"}); err != nil || acc.Action != signals.Woke {
		t.Fatalf("Send to held: %+v, %v", acc, err)
	}
	awaitRun("held-0", 10*time.Second)

	srv.Pause(t)
	t.Cleanup(func() { srv.Resume(t) })
	send := func(thread, id string) (time.Duration, error) {
		sctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := rt.Send(sctx, thread, signals.Signal{ID: id, Type: "t"})
		return time.Since(start), err
	}
	check := func(what string, d time.Duration, err error) {
		t.Helper()
		t.Logf("%s: returned after %v: %v", what, d.Round(time.Millisecond), err)
		if err == nil {
			t.Errorf("%s: nil error from a Send on a stopped server", what)
		}
		if d > time.Second {
			t.Errorf("%s: returned %v after it began, with a 300ms ctx", what, d.Round(time.Millisecond))
		}
	}
	d, err := send("fresh", "fresh-1")
	check("Send to a thread nobody holds", d, err)
	d, err = send("held", "held-1")
	check("Send to a thread this process holds", d, err)
	var wg sync.WaitGroup
	var slowest time.Duration
	var smu sync.Mutex
	for i := range 20 {
		wg.Go(func() {
			d, err := send(fmt.Sprint("many-", i), fmt.Sprint("many-", i, "-1"))
			smu.Lock()
			defer smu.Unlock()
			slowest = max(slowest, d)
			if err == nil {
				t.Errorf("Send many-%d: nil error on a stopped server", i)
			}
		})
	}
	wg.Wait()
	t.Logf("20 Sends at once to threads nobody holds: the slowest returned after %v", slowest.Round(time.Millisecond))
	if slowest > time.Second {
		t.Errorf("20 Sends at once: the slowest returned %v after it began, with a 300ms ctx", slowest.Round(time.Millisecond))
	}

	// The server answers again: the acquires still in flight complete. No
	// thread is left leased to a run that never starts.
	time.Sleep(500 * time.Millisecond)
	srv.Resume(t)
	close(hold)
	resumed := time.Now()
	threads := []string{"fresh", "held"}
	for i := range 20 {
		threads = append(threads, fmt.Sprint("many-", i))
	}
	for _, th := range threads {
		if _, err := rt.Send(ctx, th, signals.Signal{ID: th + "-2", Type: "t"}); err != nil {
			t.Fatalf("Send to %s after the server came back: %v", th, err)
		}
	}
	for _, th := range threads {
		awaitRun(th+"-2", 5*time.Second)
	}
	t.Logf("a new signal to each of the %d threads ran within %v of the resume", len(threads), time.Since(resumed).Round(time.Millisecond))
	// Retrying a Send that gave up runs its signal once.
	for _, th := range threads {
		if _, err := rt.Send(ctx, th, signals.Signal{ID: th + "-1", Type: "t"}); err != nil {
			t.Fatalf("retry to %s: %v", th, err)
		}
	}
	for _, th := range threads {
		awaitRun(th+"-1", 5*time.Second)
	}
	time.Sleep(300 * time.Millisecond)
	for _, th := range threads {
		for _, id := range []string{th + "-1", th + "-2"} {
			if n := runsOf(id); n != 1 {
				t.Errorf("signal %s ran %d times, want once", id, n)
			}
		}
	}
}

// TestSendOnEndedCtxLeavesNothing: a Send whose ctx has already ended
// sends nothing and leaves nothing behind: it fails, and no tenure starts
// (an acquire never sent has a known outcome, so nothing settles it).
func TestSendOnEndedCtxLeavesNothing(t *testing.T) {
	srv, _ := startRedis(t)
	ctx := context.Background()
	var (
		mu     sync.Mutex
		events []signals.Event
	)
	rt, _ := urlRuntime(t, srv.URL(), "sendended", "A", func(context.Context, *signals.Run) error { return nil }, nil,
		signals.WithObserver(func(e signals.Event) {
			mu.Lock()
			events = append(events, e)
			mu.Unlock()
		}))
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := rt.Send(cctx, "ended", signals.Signal{ID: "e1", Type: "t"}); err == nil {
		t.Fatal("Send on an ended ctx returned nil")
	}
	time.Sleep(500 * time.Millisecond) // a settle would try after 50ms
	mu.Lock()
	defer mu.Unlock()
	for _, e := range events {
		if e.Thread == "ended" {
			t.Errorf("a Send on an ended ctx left an event behind: %+v", e)
		}
	}
}
