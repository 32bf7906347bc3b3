package signals_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

// TestCloseOnStalledServerAfterLostLeases: tenures lose their leases while
// the server is stalled (SIGSTOP, not resumed); Close(ctx 1s) "cancels the
// runs' contexts, waits for them to return and returns ctx.Err()". Its
// unsubscribes wait for go-redis's timeouts (about 14s here, as before the
// drained-inbox retries came); found by review 8 of 2026-11-22: those retries
// (tidyLater) added up to two lease TTLs (28.8s), because their calls did not
// end when Close's ctx did. The bound is the default TTL (15s).
func TestCloseOnStalledServerAfterLostLeases(t *testing.T) {
	srv, _ := startRedis(t)
	ctx := context.Background()
	b, err := redisstreams.NewURL(ctx, srv.URL(), redisstreams.Options{Prefix: "cs"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	var ran atomic.Int64
	agent := func(ctx context.Context, run *signals.Run) error {
		ran.Add(int64(len(run.Signals)))
		return nil
	}
	rt, err := signals.New(b, agent, signals.WithLinger(60*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	const n = 5
	for i := range n {
		if _, err := rt.Send(ctx, fmt.Sprint("t", i), signals.Signal{Type: "msg"}); err != nil {
			t.Fatal(err)
		}
	}
	for ran.Load() < n {
		time.Sleep(10 * time.Millisecond)
	}
	srv.Pause(t)
	t.Cleanup(func() { srv.Resume(t) })
	time.Sleep(20 * time.Second) // > the 15s default TTL: the lingering tenures lose their leases
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	start := time.Now()
	err = rt.Close(cctx)
	d := time.Since(start)
	t.Logf("Close = %v after %v", err, d)
	if d > 15*time.Second {
		t.Fatalf("Close(ctx 1s) on a stalled server took %v", d)
	}
}
