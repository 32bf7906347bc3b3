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

// TestHandOffReplyLostIsAdopted: a run ends with a signal queued, and the
// tenure hands the thread over to the next run with a transfer whose reply
// is lost (the connection is reset right after the transfer was sent, as a
// proxy or load balancer may do; the server runs it). The Held's renewal
// then finds the lease gone, the tenure ends with its lease lost, and the
// lease belongs to the next run, which never started. Before, the queued
// signal waited for that lease's TTL (4s here) and the recovery interval.
// Now the runtime remembers the hand-off and takes the thread over for
// that run: the queued signal, sent from a peer, runs within 1.5s of the
// first run's end, once.
func TestHandOffReplyLostIsAdopted(t *testing.T) {
	srv, _ := startRedis(t)
	proxy := redistest.NewProxy(t, srv.Addr())
	ctx := context.Background()
	const ttl = 4 * time.Second
	var (
		mu      sync.Mutex
		ran     = map[string]int{}
		release = make(chan struct{})
	)
	agent := func(ctx context.Context, r *signals.Run) error {
		for _, s := range r.Signals {
			mu.Lock()
			ran[s.ID]++
			mu.Unlock()
			if s.ID == "first" {
				select {
				case <-release:
				case <-ctx.Done():
				}
			}
		}
		return nil
	}
	runsOf := func(id string) int {
		mu.Lock()
		defer mu.Unlock()
		return ran[id]
	}
	var lost int
	observe := signals.WithObserver(func(e signals.Event) {
		if e.Kind == signals.LeaseLost && e.Thread == "h" {
			mu.Lock()
			lost++
			mu.Unlock()
		}
	})
	opts := []signals.Option{signals.WithLeaseTTL(ttl), signals.WithRecoveryInterval(500 * time.Millisecond)}
	a, _ := urlRuntime(t, "redis://"+proxy.Addr(), "lateho", "A", agent, nil, append(opts, observe)...)
	b, _ := urlRuntime(t, srv.URL(), "lateho", "B", agent, nil, opts...)

	if acc, err := a.Send(ctx, "h", signals.Signal{ID: "first", Type: "t"}); err != nil || acc.Action != signals.Woke {
		t.Fatalf("first Send: %+v, %v", acc, err)
	}
	for runsOf("first") == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	if acc, err := b.Send(ctx, "h", signals.Signal{ID: "queued", Type: "t"}); err != nil || acc.Action != signals.Forwarded {
		t.Fatalf("queued Send: %+v, %v", acc, err)
	}
	// Every try of the hand-off's transfer (go-redis retries a call whose
	// reply it lost; transfer.lua reports a retry of a transfer that ran as
	// done) loses its reply: the script, by its SHA1 (EVALSHA) or its text
	// (EVAL), on the thread's lease key.
	// (The script is cached on the server first: a NOSCRIPT reply cut
	// would never let it run.)
	warm, err := redisstreams.NewURL(ctx, srv.URL(), redisstreams.Options{Prefix: "lateho"})
	if err != nil {
		t.Fatal(err)
	}
	defer warm.Close()
	if _, err := warm.AcquireLease(ctx, "warm", "x", time.Minute); err != nil {
		t.Fatal(err)
	}
	if ok, err := warm.TransferLease(ctx, "warm", "x", "y", time.Minute); err != nil || !ok {
		t.Fatalf("warm-up transfer: %v, %v", ok, err)
	}
	src, err := os.ReadFile("../redisstreams/lua/transfer.lua")
	if err != nil {
		t.Fatal(err)
	}
	sum := sha1.Sum(src)
	sha := []byte(hex.EncodeToString(sum[:]))
	key := []byte(signals.LeaseKey("h"))
	var cuts int
	proxy.CutReplies(func(w []byte) bool {
		if bytes.Contains(w, key) && (bytes.Contains(w, sha) || bytes.Contains(w, []byte("transfer.lua:"))) {
			mu.Lock()
			cuts++
			mu.Unlock()
			return true
		}
		return false
	})
	time.Sleep(300 * time.Millisecond) // the queued signal reached the tenure
	close(release)
	ended := time.Now()
	for runsOf("queued") == 0 {
		if time.Since(ended) > 1500*time.Millisecond {
			t.Fatalf("the queued signal did not run within 1.5s of the first run's end (lease TTL %v)", ttl)
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("the queued signal ran %v after the first run ended", time.Since(ended).Round(time.Millisecond))
	time.Sleep(300 * time.Millisecond)
	if n := runsOf("queued"); n != 1 {
		t.Errorf("the queued signal ran %d times, want once", n)
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("the hand-off's replies cut: %d", cuts)
	if lost != 1 || cuts == 0 {
		t.Errorf("premise: %d LeaseLost events of A's tenure, %d replies cut; want 1 (the hand-off ran and its replies were lost)", lost, cuts)
	}
}
