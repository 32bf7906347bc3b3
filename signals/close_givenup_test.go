package signals_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leasebus/leasebus/signals"
)

// TestReleaseGivenUpBoundedOnStalledServer: Sends with 100ms ctxs while the
// server is stopped (SIGSTOP) leave acquires of unknown outcome (up to 160),
// each remembered (givenup.go). What Close does last for them (release
// their leases) must return within about closeGrace (1s) on the stopped
// server, whatever their number. Review revO (helper 20): 16 at a time,
// each bounded by closeGrace alone, it added 4.0-5.0s to a Close with a ctx
// that does not end for 64-77 of them (about 10 minutes for the 10,000
// the map allows).
func TestReleaseGivenUpBoundedOnStalledServer(t *testing.T) {
	srv, _ := startRedis(t)
	ctx := context.Background()
	var rc runCounter
	rt, _ := urlRuntime(t, srv.URL(), "cgu", "A", rc.agent, nil,
		signals.WithLeaseTTL(4*time.Second), signals.WithRecoveryInterval(500*time.Millisecond))
	if _, err := rt.Send(ctx, "warm", signals.Signal{ID: "warm", Type: "t"}); err != nil {
		t.Fatal(err)
	}
	revWaitFor(t, "warm ran", 5*time.Second, func() bool { return rc.of("warm") > 0 })
	srv.Pause(t)
	t.Cleanup(func() { srv.Resume(t) })
	const n = 160
	var wg sync.WaitGroup
	sem := make(chan struct{}, n)
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			th := fmt.Sprint("cgu-", i)
			sctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			defer cancel()
			_, _ = rt.Send(sctx, th, signals.Signal{ID: th, Type: "t"})
		})
	}
	wg.Wait()
	noted := 0
	for i := range n {
		if signals.GivenUp(rt, fmt.Sprint("cgu-", i)) > 0 {
			noted++
		}
	}
	// Only the acquires sent before their ctx ended have an unknown outcome:
	// those of the first few batches (the lease calls' lane waits for
	// them). With 40 Sends at a time a full run once got 30 of 160; all at
	// once, 143-160 of 160 in 4 runs. More than 16 tells the bound from
	// the old 16 at a time, each bounded by closeGrace (2s or more).
	if noted <= 16 {
		t.Fatalf("premise: %d of %d threads remembered, want more than 16", noted, n)
	}
	start := time.Now()
	signals.ReleaseGivenUp(ctx, rt)
	took := time.Since(start)
	t.Logf("releasing the leases of %d remembered runs on a stopped server took %v", noted, took.Round(time.Millisecond))
	if took > 1500*time.Millisecond {
		t.Errorf("releasing the leases of %d remembered runs on a stopped server took %v, want about closeGrace (1s)", noted, took.Round(time.Millisecond))
	}
	srv.Resume(t)
}
