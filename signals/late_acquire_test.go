package signals_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

// TestLateAcquireAfterSettleIsAdopted: an acquire that Redis runs only
// after the runtime stopped settling it (the server stopped answering for
// longer than a lease TTL, as in a black hole that heals; the commands
// written before it are run when it answers again) takes the thread's
// lease for a run that never starts. Before, the thread then waited a
// whole TTL: a later Send from the same process reported Forwarded to its
// own dead run, and one from a peer was run only once that lease lapsed.
// Now the runtime remembers the owners of the acquires it gave up on and
// takes such a lease over for the run it was for: both Sends' signals run
// within 1.5s (the TTL is 4s), each once, and the local Send does not
// report Forwarded.
func TestLateAcquireAfterSettleIsAdopted(t *testing.T) {
	t.Parallel() // mostly waits (TTLs, windows, a stalled server): beside another (CI time)
	srv, _ := startRedis(t)
	ctx := context.Background()
	const ttl = 4 * time.Second
	var rc runCounter // one for both runtimes
	agent, runsOf := rc.agent, rc.of
	opts := []signals.Option{signals.WithLeaseTTL(ttl), signals.WithRecoveryInterval(500 * time.Millisecond)}
	a, _ := urlRuntime(t, srv.URL(), "late", "A", agent, nil, opts...)
	b, _ := urlRuntime(t, srv.URL(), "late", "B", agent, nil, opts...)
	// Warm both clients: connections open (as many as the Sends below
	// take at once: a connection dialled while the server is stopped sends
	// nothing), scripts loaded.
	const n = 6 // threads per case
	var warm []string
	var wg sync.WaitGroup
	for i, rt := range []*signals.Runtime{a, b} {
		for j := range 2 * n {
			id := fmt.Sprint("warm-", i, "-", j)
			warm = append(warm, id)
			wg.Go(func() {
				if _, err := rt.Send(ctx, id, signals.Signal{ID: id, Type: "t"}); err != nil {
					t.Error(err)
				}
			})
		}
	}
	wg.Wait()
	for _, id := range warm {
		for runsOf(id) == 0 {
			time.Sleep(5 * time.Millisecond)
		}
	}
	look, err := redisstreams.NewURL(ctx, srv.URL(), redisstreams.Options{Prefix: "late"})
	if err != nil {
		t.Fatal(err)
	}
	defer look.Close()
	lateLeased := func(th string) bool {
		owner, err := look.GetLeaseOwner(ctx, signals.LeaseKey(th))
		if err != nil {
			t.Fatal(err)
		}
		return strings.HasPrefix(owner, "A/")
	}
	// A round: Sends with a 300ms ctx from A to 2n new threads while the
	// server is stopped; the runtime settles their acquires for a TTL,
	// then gives up; then the server answers again and runs the acquires
	// written before the stop: their threads are leased to runs of A that
	// never started. An acquire still waiting in the client for a
	// connection was never written; a round in which none of either half
	// was written is repeated (up to 4 rounds).
	var locals, peers []string
	var resumed time.Time
	for round := 0; len(locals) == 0 || len(peers) == 0; round++ {
		if round == 4 {
			t.Fatalf("premise: in 4 rounds no late acquire took a lease of both halves")
		}
		local := func(i int) string { return fmt.Sprint("local-", round, "-", i) }
		peer := func(i int) string { return fmt.Sprint("peer-", round, "-", i) }
		srv.Pause(t)
		for i := range n {
			for _, th := range []string{local(i), peer(i)} {
				wg.Go(func() {
					sctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
					defer cancel()
					if _, err := a.Send(sctx, th, signals.Signal{ID: th + "-1", Type: "t"}); err == nil {
						t.Errorf("Send to %s on a stopped server: nil error", th)
					}
				})
			}
		}
		wg.Wait()
		time.Sleep(ttl + time.Second)
		srv.Resume(t)
		resumed = time.Now()
		time.Sleep(200 * time.Millisecond)
		locals, peers = nil, nil
		for i := range n {
			if lateLeased(local(i)) {
				locals = append(locals, local(i))
			}
			if lateLeased(peer(i)) {
				peers = append(peers, peer(i))
			}
		}
		t.Logf("round %d: threads leased to a run of A after the resume: %v, %v", round, locals, peers)
	}
	var ids []string
	sendsAt := time.Now()
	for _, th := range locals {
		acc, err := a.Send(ctx, th, signals.Signal{ID: th + "-2", Type: "t"})
		if err != nil {
			t.Fatal(err)
		}
		if acc.Action == signals.Forwarded {
			t.Errorf("Send to %s from A: Forwarded to %s, a run of A that never started", th, acc.Owner)
		}
		ids = append(ids, th+"-2")
	}
	for _, th := range peers {
		if _, err := b.Send(ctx, th, signals.Signal{ID: th + "-2", Type: "t"}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, th+"-2")
	}
	for _, id := range ids {
		for runsOf(id) == 0 {
			if time.Since(resumed) > 1500*time.Millisecond {
				t.Fatalf("signal %s did not run within 1.5s of the resume (lease TTL %v)", id, ttl)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	t.Logf("the signals to the %d late-leased threads ran within %v of the resume, %v of their Sends", len(ids),
		time.Since(resumed).Round(time.Millisecond), time.Since(sendsAt).Round(time.Millisecond))
	time.Sleep(200 * time.Millisecond)
	for _, id := range ids {
		if k := runsOf(id); k != 1 {
			t.Errorf("signal %s ran %d times, want once", id, k)
		}
	}
	// (The runtime keeps remembering those runs for givenUpFor: another
	// copy of an acquire may come later, TestLateStragglerAfterTakeover;
	// TestGivenUpSweptWhenExpired shows the entries go.)
}
