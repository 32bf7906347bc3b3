package redisstreams

import (
	"context"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
)

// retryUntil calls f every 20ms until it returns nil or bound has passed.
// It returns how long that took, how many calls failed first, and the last
// error when none succeeded (nil when one did).
func retryUntil(bound time.Duration, f func() error) (took time.Duration, failed int, err error) {
	start := time.Now()
	for {
		if err = f(); err == nil {
			return time.Since(start), failed, nil
		}
		failed++
		if time.Since(start) >= bound {
			return time.Since(start), failed, err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// killAndAwaitPromotion kills (SIGKILL) the Cluster node at addr, a master,
// and waits up to 30s until one of its replicas answers ROLE as master. It
// returns the killed node (restart it at the end: go-redis's pools redial
// a dead address from goroutines of their own, every second, which goleak
// would find if the test ran last; it still can for up to a second after
// the restart, so such tests do not run in parallel, where they would come
// last: goleak caught them in 3 of 5 runs) and the promoted one.
func killAndAwaitPromotion(t *testing.T, cl *redistest.Cluster, addr string, replicas []*redistest.Server) (victim, promoted *redistest.Server) {
	t.Helper()
	for _, n := range cl.Nodes() {
		if n.Addr() == addr {
			victim = n
		}
	}
	if victim == nil {
		t.Fatalf("no node at %s", addr)
	}
	victim.Kill(t)
	killed := time.Now()
	for promoted == nil {
		for _, r := range replicas {
			if role, err := r.Client(t).Do(context.Background(), "ROLE").Slice(); err == nil && role[0] == "master" {
				promoted = r
			}
		}
		if promoted != nil {
			break
		}
		if time.Since(killed) > 30*time.Second {
			t.Fatalf("no replica of %s promoted within 30s", addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("replica %s promoted %v after the kill of %s", promoted.Addr(), time.Since(killed).Round(time.Millisecond), addr)
	return victim, promoted
}
