package signals_test

import (
	"bytes"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

// TestReleaseFailedIsTakenOver: a tenure of runtime A ends and its release
// fails without reaching Redis (A's connections are cut and new ones
// refused, as when a proxy or the network drops A's path for a moment), so
// the thread stays leased to A's ended tenure until the TTL. Then A's path
// comes back and a signal is sent to the thread.
//
//   - OwnSend: A sends it. Before, A's Send reported Forwarded to that
//     ended tenure, A's own (Forwarded says another process holds the
//     thread), and the signal ran only once the lease lapsed (after the
//     TTL, 6s here).
//   - PeerSend: peer B sends it, Forwarded to A's ended tenure. Before,
//     it ran only once that lease lapsed.
//
// Now A remembers a tenure whose release failed as it does a call of
// unknown outcome (givenup.go) and takes the lease over for it: the
// signal runs within 2s, once, and A's Send is not Forwarded to itself.
func TestReleaseFailedIsTakenOver(t *testing.T) {
	for _, peer := range []bool{false, true} {
		name := map[bool]string{false: "OwnSend", true: "PeerSend"}[peer]
		t.Run(name, func(t *testing.T) { testReleaseFailed(t, peer) })
	}
}

func testReleaseFailed(t *testing.T, peer bool) {
	const ttl = 6 * time.Second
	srv, _ := startRedis(t)
	proxy := redistest.NewProxy(t, srv.Addr())
	ctx := context.Background()
	var (
		mu       sync.Mutex
		ran      = map[string]int{}
		runOf    = map[string]*signals.Run{} // the run each signal last ran in
		cut      bool
		released = make(chan struct{}, 1)
	)
	agent := func(ctx context.Context, r *signals.Run) error {
		mu.Lock()
		defer mu.Unlock()
		for _, s := range r.Signals {
			ran[s.ID]++
			runOf[s.ID] = r
		}
		return nil
	}
	runsOf := func(id string) int {
		mu.Lock()
		defer mu.Unlock()
		return ran[id]
	}
	hooks := signals.WithHooks(signals.Hooks{BeforeRelease: func(thread string) {
		mu.Lock()
		defer mu.Unlock()
		if thread == "h" && !cut {
			cut = true
			proxy.SetRefuse(true)
			proxy.CutAll()
		}
	}})
	observe := signals.WithObserver(func(e signals.Event) {
		if e.Kind == signals.Released && e.Thread == "h" {
			select {
			case released <- struct{}{}:
			default:
			}
		}
	})
	opts := []signals.Option{signals.WithLeaseTTL(ttl), signals.WithRecoveryInterval(500 * time.Millisecond),
		signals.WithLinger(20 * time.Millisecond)}
	a, _ := urlRuntime(t, "redis://"+proxy.Addr(), "relfail", "A", agent, nil, append(opts[:len(opts):len(opts)], hooks, observe)...)
	b, _ := urlRuntime(t, srv.URL(), "relfail", "B", agent, nil, opts...)
	look, err := redisstreams.NewURL(ctx, srv.URL(), redisstreams.Options{Prefix: "relfail"})
	if err != nil {
		t.Fatal(err)
	}
	defer look.Close()

	acc, err := a.Send(ctx, "h", signals.Signal{ID: "first", Type: "t"})
	if err != nil || acc.Action != signals.Woke {
		t.Fatalf("first Send: %+v, %v", acc, err)
	}
	select {
	case <-released:
	case <-time.After(ttl):
		t.Fatal("A's tenure did not end within the TTL")
	}
	owner, err := look.GetLeaseOwner(ctx, signals.LeaseKey("h"))
	if err != nil {
		t.Fatal(err)
	}
	if owner != acc.Owner {
		t.Fatalf("premise: after the failed release the lease is held by %q, want A's tenure %q", owner, acc.Owner)
	}
	proxy.SetRefuse(false)
	back := time.Now()

	sender := a
	if peer {
		sender = b
	}
	acc2, err := sender.Send(ctx, "h", signals.Signal{ID: "second", Type: "t"})
	if err != nil {
		t.Fatalf("second Send: %v", err)
	}
	if !peer && acc2.Action == signals.Forwarded && acc2.Owner == acc.Owner {
		t.Errorf("A's Send was Forwarded to A's own ended tenure %s", acc2.Owner)
	}
	for runsOf("second") == 0 {
		if time.Since(back) > 2*time.Second {
			t.Fatalf("the second signal (%+v) did not run within 2s of A's path coming back (lease TTL %v)", acc2, ttl)
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("second Send: %v; it ran %v after A's path came back", acc2.Action, time.Since(back).Round(time.Millisecond))
	time.Sleep(300 * time.Millisecond)
	if n := runsOf("second"); n != 1 {
		t.Errorf("the second signal ran %d times, want once", n)
	}
	if n := runsOf("first"); n != 1 {
		t.Errorf("the first signal ran %d times, want once", n)
	}
	// The run that took the thread over is a new run: its own ID and a
	// higher fencing token than the tenure whose release failed (doc.go,
	// "Lease owners are <process>/<run id>, fresh per run"; guarantee 1).
	mu.Lock()
	r1, r2 := runOf["first"], runOf["second"]
	mu.Unlock()
	if r1 != nil && r2 != nil {
		if r2.ID == r1.ID || r2.Token <= r1.Token {
			t.Errorf("the second signal ran as run %s token %d, after run %s token %d (the tenure whose release failed): want a new run with a higher token",
				r2.ID, r2.Token, r1.ID, r1.Token)
		}
	}
}

// releaseWrite returns a matcher of the client writes that call the lease
// release script (by its SHA1, EVALSHA, or its text, EVAL) on thread's
// lease key, for redistest.Proxy's HoldNext and CutReplies.
func releaseWrite(t *testing.T, thread string) func(w []byte) bool {
	t.Helper()
	src, err := os.ReadFile("../redisstreams/lua/release.lua")
	if err != nil {
		t.Fatal(err)
	}
	sum := sha1.Sum(src)
	sha := []byte(hex.EncodeToString(sum[:]))
	key := []byte(signals.LeaseKey(thread))
	return func(w []byte) bool {
		return bytes.Contains(w, key) && (bytes.Contains(w, sha) || bytes.Contains(w, []byte("release.lua")))
	}
}

// warmRelease runs a signal on thread "warm" from rt and waits until look
// sees its lease released: the release script is then in the server's
// script cache, as on any server that has seen one (a delayed EVALSHA of
// an uncached script runs nothing).
func warmRelease(t *testing.T, rt *signals.Runtime, look *redisstreams.Backend) {
	t.Helper()
	ctx := context.Background()
	if _, err := rt.Send(ctx, "warm", signals.Signal{ID: "w", Type: "t"}); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		if o, _ := look.GetLeaseOwner(ctx, signals.LeaseKey("warm")); o == "" {
			return
		}
		if i > 1000 {
			t.Fatal("the warm-up thread was not released")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
