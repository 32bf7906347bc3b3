package signals_test

import (
	"bytes"
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

// TestCloseWithRecoveryAcquireInHole: Close's doc says that whatever its
// ctx its teardown ends about a lease TTL after the later of Close's start
// and the last run's return, also on a server that stopped answering. A
// notice handler's try of a free-looking lease (a recovery acquire) sent
// just as the network path black-holes is bounded only by Close giving up
// (hardCtx), and Close waits for it (rt.wg): found by
// TestBlackHoleOneRuntimeUnderLoad/CloseInHole (Close with a 10s ctx took
// 10.0s, 2 of 6 runs). Here A (NewURL default client through a proxy)
// takes every wake notice; a Send from B to a thread held by an outside
// owner makes A's handler try the lease; the proxy holds that call and then
// black-holes A; A has no run. Close(context.Background()) must return
// within TTL + 1s.
func TestCloseWithRecoveryAcquireInHole(t *testing.T) {
	srv, _ := startRedis(t)
	proxy := redistest.NewProxy(t, srv.Addr())
	ctx := context.Background()
	const ttl = 2 * time.Second
	const th = "rhole"
	ab, err := redisstreams.NewURL(ctx, "redis://"+proxy.Addr()+"/0", redisstreams.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ab.Close()
	a, err := signals.New(ab, func(ctx context.Context, r *signals.Run) error { return nil },
		signals.WithProcessID("A"), signals.WithLeaseTTL(ttl), signals.WithRecoveryInterval(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	bb, err := redisstreams.NewURL(ctx, srv.URL(), redisstreams.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer bb.Close()
	b := newRuntime(t, noWorkGroup{bb}, func(ctx context.Context, r *signals.Run) error { return nil },
		signals.WithProcessID("B"), signals.WithLeaseTTL(ttl))
	// An outside owner holds the thread, so B's Send is Forwarded and A's
	// notice handler tries the lease.
	if _, err := bb.AcquireLease(ctx, signals.LeaseKey(th), "Z/00000000-0000-0000-0000-000000000000", time.Minute); err != nil {
		t.Fatal(err)
	}
	var held atomic.Bool
	key := []byte(signals.LeaseKey(th))
	proxy.HoldNext(func(w []byte) bool {
		if bytes.Contains(bytes.ToLower(w), []byte("evalsha")) && bytes.Contains(w, key) {
			held.Store(true)
			return true
		}
		return false
	})
	if _, err := b.Send(ctx, th, signals.Signal{ID: "s1", Type: "t"}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !held.Load() {
		if time.Now().After(deadline) {
			t.Fatal("A's handler sent no lease call for the thread")
		}
		time.Sleep(5 * time.Millisecond)
	}
	proxy.BlackHole()
	defer proxy.Restore()
	time.Sleep(100 * time.Millisecond)
	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	start := time.Now()
	err = a.Close(cctx)
	took := time.Since(start)
	t.Logf("A's Close took %v (err %v), TTL %v", took.Round(time.Millisecond), err, ttl)
	if took > ttl+time.Second {
		t.Fatalf("A's Close(context.Background()) took %v with no run, TTL %v: its teardown waited for a notice handler's lease call to a server that stopped answering", took.Round(time.Millisecond), ttl)
	}
}
