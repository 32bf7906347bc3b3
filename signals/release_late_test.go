package signals_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

// TestReleaseFailedLateReleaseRunsTwice (review revV): a tenure's release
// is delayed by the network past the client's timeouts (the proxy holds
// the connection it was written on, and each retry, as TCP does with a
// retransmission until a partition heals) and fails; the lease is still
// the tenure's (owner X). At 4e6f429 the runtime took it over as a call of
// unknown outcome: an acquire for the same owner X, which the lease grants,
// and a Recovered tenure ran the next signal under X. Then the network
// delivered the delayed release of X: Redis ran it and deleted the lease
// that tenure held. A peer's Send took the free thread and ran while A's
// run still went on: two runs of the thread at once, until A's next
// renewal (TTL/3) found the lease gone. Now such a lease is released again
// and the thread taken for a new run under a new owner, whose lease the
// late release of X leaves alone: the peer's third signal is Forwarded to
// that run, and the thread never has two runs at once.
func TestReleaseFailedLateReleaseRunsTwice(t *testing.T) {
	t.Parallel() // waits on a stalled server or a TTL, hardly any CPU: beside the others (CI time)
	const ttl = 30 * time.Second
	srv, _ := startRedis(t)
	proxy := redistest.NewProxy(t, srv.Addr())
	ctx := context.Background()
	isRelease := releaseWrite(t, "h")
	var (
		holds   atomic.Int32
		holding atomic.Bool
	)
	var arm func()
	arm = func() {
		proxy.HoldNext(func(w []byte) bool {
			if !holding.Load() || !isRelease(w) {
				return false
			}
			holds.Add(1)
			go arm() // the retry, on another connection
			return true
		})
	}

	var (
		mu        sync.Mutex
		active    int
		maxActive int
		ran       = map[string]int{}
		gate      = make(chan struct{})
		started2  = make(chan struct{})
		once2     sync.Once
		released  = make(chan time.Time, 4)
		firstDone bool
	)
	agent := func(ctx context.Context, r *signals.Run) error {
		mu.Lock()
		active++
		maxActive = max(maxActive, active)
		second := false
		for _, s := range r.Signals {
			ran[s.ID]++
			second = second || s.ID == "second"
		}
		mu.Unlock()
		defer func() {
			mu.Lock()
			active--
			mu.Unlock()
		}()
		if second {
			once2.Do(func() { close(started2) })
			select {
			case <-gate:
			case <-ctx.Done(): // the run's lease ended
			case <-time.After(2 * ttl):
			}
		}
		return nil
	}
	hooks := signals.WithHooks(signals.Hooks{BeforeRelease: func(thread string) {
		mu.Lock()
		defer mu.Unlock()
		if thread == "h" && !firstDone {
			firstDone = true
			holding.Store(true)
			arm()
		}
	}})
	observe := signals.WithObserver(func(e signals.Event) {
		if e.Thread == "h" {
			t.Logf("%s A: %v run=%s owner=%s token=%d err=%v", time.Now().Format("15:04:05.000"), e.Kind, e.RunID, e.Owner, e.Token, e.Err)
		}
		if e.Kind == signals.Released && e.Thread == "h" {
			select {
			case released <- time.Now():
			default:
			}
		}
	})
	observeB := signals.WithObserver(func(e signals.Event) {
		if e.Thread == "h" {
			t.Logf("%s B: %v run=%s owner=%s token=%d err=%v", time.Now().Format("15:04:05.000"), e.Kind, e.RunID, e.Owner, e.Token, e.Err)
		}
	})
	opts := []signals.Option{signals.WithLeaseTTL(ttl), signals.WithRecoveryInterval(500 * time.Millisecond),
		signals.WithLinger(20 * time.Millisecond)}
	a, _ := urlRuntime(t, "redis://"+proxy.Addr(), "latrel", "A", agent, nil, append(opts[:len(opts):len(opts)], hooks, observe)...)
	b, _ := urlRuntime(t, srv.URL(), "latrel", "B", agent, nil, append(opts[:len(opts):len(opts)], observeB)...)
	look, err := redisstreams.NewURL(ctx, srv.URL(), redisstreams.Options{Prefix: "latrel"})
	if err != nil {
		t.Fatal(err)
	}
	defer look.Close()
	defer close(gate)

	warmRelease(t, a, look)

	acc, err := a.Send(ctx, "h", signals.Signal{ID: "first", Type: "t"})
	if err != nil || acc.Action != signals.Woke {
		t.Fatalf("first Send: %+v, %v", acc, err)
	}
	// While A's release is held: B's signal waits in the inbox (Forwarded
	// to A's ended tenure).
	deadline := time.Now().Add(10 * time.Second)
	for holds.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("A's release was not held")
		}
		time.Sleep(5 * time.Millisecond)
	}
	heldAt := time.Now()
	acc2, err := b.Send(ctx, "h", signals.Signal{ID: "second", Type: "t"})
	t.Logf("B's Send of second: %+v, %v", acc2, err)
	var relAt time.Time
	select {
	case relAt = <-released:
	case <-time.After(ttl):
		t.Fatal("A's release did not end within the TTL")
	}
	holding.Store(false)
	proxy.HoldNext(nil)
	t.Logf("A's release ended %v after it was held (%d writes held)", relAt.Sub(heldAt).Round(time.Millisecond), holds.Load())
	select {
	case <-started2:
	case <-time.After(2 * ttl):
		t.Fatal("the second signal did not run")
	}
	o, _ := look.GetLeaseOwner(ctx, signals.LeaseKey("h"))
	t.Logf("second runs %v after the release was held; lease owner %q (first tenure %q)", time.Since(heldAt).Round(time.Millisecond), o, acc.Owner)
	// The network delivers the delayed release.
	n := proxy.Release()
	time.Sleep(100 * time.Millisecond)
	o2, _ := look.GetLeaseOwner(ctx, signals.LeaseKey("h"))
	t.Logf("released %d held connections; lease owner now %q", n, o2)
	acc3, err := b.Send(ctx, "h", signals.Signal{ID: "third", Type: "t"})
	t.Logf("B's Send of third: %+v, %v", acc3, err)
	// A peer that found the thread free (its lease deleted under A's run)
	// would run the third signal at once: wait a little for that, or for
	// two runs at once.
	deadline = time.Now().Add(3 * time.Second)
	for {
		mu.Lock()
		r3, m := ran["third"], maxActive
		mu.Unlock()
		if r3 > 0 || m > 1 || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("ran %v, at most %d runs of the thread at once", ran, maxActive)
	if maxActive > 1 {
		t.Errorf("%d runs of thread h at once: a late copy of the failed release deleted the lease that the takeover holds under the same owner", maxActive)
	}
}
