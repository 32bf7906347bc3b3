package redisstreams

import (
	"bytes"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
)

// killAndAwaitPromotion is redistest's Cluster.FailOver of the master at
// addr, which replicas replicate, and logs how long the promotion took. It
// returns the killed node (restart it at the end with
// restartAwaitingRedials: go-redis's pools redial a dead address from
// goroutines of their own, every second, which goleak would find if the
// test ran last; they can for up to a second after the restart, so
// restartAwaitingRedials waits for them to end; such tests also stay out
// of parallel, where they came last: goleak caught them in 3 of 5 runs)
// and the promoted one.
func killAndAwaitPromotion(t *testing.T, cl *redistest.Cluster, addr string, replicas []*redistest.Server) (victim, promoted *redistest.Server) {
	t.Helper()
	victim, promoted, killed := cl.FailOver(t, addr)
	if !slices.Contains(replicas, promoted) {
		t.Fatalf("%s promoted, not one of the replicas of %s the test saw", promoted.Addr(), addr)
	}
	t.Logf("replica %s promoted %v after the kill of %s", promoted.Addr(), time.Since(killed).Round(time.Millisecond), addr)
	return victim, promoted
}

// restartAwaitingRedials restarts victim, a node the test killed, and
// waits (at most 5s) until no goroutine of go-redis's pools still redials
// a dead address (ConnPool.tryDial sleeps a second between tries; once the
// node is back its next dial succeeds and it returns), so that goleak does
// not find one when the test runs last, as when it runs alone.
func restartAwaitingRedials(t *testing.T, victim *redistest.Server) {
	t.Helper()
	victim.Restart(t)
	deadline := time.Now().Add(5 * time.Second)
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n == len(buf) {
			buf = make([]byte, 2*len(buf))
			continue
		}
		if !bytes.Contains(buf[:n], []byte("pool.(*ConnPool).tryDial")) {
			return
		}
		if time.Now().After(deadline) {
			t.Logf("go-redis still redials 5s after the restart of %s", victim.Addr())
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}
