package signals_test

import (
	"sync"
	"testing"
	"time"

	"github.com/leasebus/leasebus/signals"
)

// TestReviewH69LateStragglerStartsRunTwice (review h69) is
// TestLateStragglerAfterTakeover watching the runs rather than the
// signals. A's Send of s1 loses its acquire's reply (and its settle's
// tries'): the acquires of unknown outcome are several commands for one
// run R of A, which a network that black-holed A's connections and healed
// delivers at different times. The first copy leases the thread to R; B's
// Send of s2 is forwarded there and A takes it over, starting R, which
// runs s2; its tenure releases. Then another copy leases the thread to R
// again, and B sends s3: A takes it over again (givenup.go: "An owner is
// not forgotten when its lease is taken over ... and is taken over
// again"), for the same run.
//
// The runs' documented identity: Run.ID "identifies the run", Run.Owner
// is "a holder token unique per tenure", Run.Token is "greater than every
// earlier run's on the thread" (run.go), and "Lease owners are
// "<process>/<run id>", fresh per run, so each run is its own tenure with
// its own fencing token" (doc.go). It asserts that no two runs started on
// the thread share a Run.ID or an Owner, and that each one's Token is
// above every earlier one's. givenup.go's note on failed releases (review
// revU) names what it costs: a takeover "for its run ... would start that
// run again under its Run.ID and fencing token".
func TestReviewH69LateStragglerStartsRunTwice(t *testing.T) {
	t.Parallel()
	type start struct {
		id, owner string
		token     uint64
		sigs      []string
	}
	var mu sync.Mutex
	var starts []start
	const th = "h69strag-thread"
	obs := signals.WithObserver(func(e signals.Event) {
		if e.Kind != signals.RunStarted || e.Thread != th {
			return
		}
		var ids []string
		for _, s := range e.Signals {
			ids = append(ids, s.ID)
		}
		mu.Lock()
		starts = append(starts, start{e.RunID, e.Owner, e.Token, ids})
		mu.Unlock()
	})
	f := newLateFix(t, "h69strag", th, "B", 3*time.Second, obs)
	owner, lost := f.loseSend(0)
	if len(lost) < 2 {
		t.Fatalf("premise: want the Send's acquire and at least one settle try, got %d", len(lost))
	}
	revWaitFor(t, "thread free after s1", 3*f.ttl, func() bool { return f.ownerOf() == "" })

	f.replay(lost[0], owner)
	if _, err := f.b.Send(f.ctx, f.th, signals.Signal{ID: "s2", Type: "t"}); err != nil {
		t.Fatal(err)
	}
	revWaitFor(t, "s2 ran (taken over)", time.Second, func() bool { return f.ran("s2") > 0 })
	revWaitFor(t, "the tenure released", 3*f.ttl, func() bool { return f.ownerOf() == "" })

	f.replay(lost[len(lost)-1], owner)
	if _, err := f.b.Send(f.ctx, f.th, signals.Signal{ID: "s3", Type: "t"}); err != nil {
		t.Fatal(err)
	}
	revWaitFor(t, "s3 ran", 2*time.Second, func() bool { return f.ran("s3") > 0 })
	time.Sleep(200 * time.Millisecond)

	mu.Lock()
	defer mu.Unlock()
	for i, s := range starts {
		t.Logf("run %d on the thread: %s owner %s token %d signals %v", i, s.id, s.owner, s.token, s.sigs)
	}
	for i, s := range starts {
		for _, p := range starts[:i] {
			if s.id == p.id || s.owner == p.owner {
				t.Errorf("a run with signals %v started under the Run.ID %s / Owner %s (token %d) of an earlier run with signals %v (token %d)",
					s.sigs, s.id, s.owner, s.token, p.sigs, p.token)
			}
			if s.token <= p.token {
				t.Errorf("run %s (signals %v) has token %d, not above the earlier run %s's %d", s.id, s.sigs, s.token, p.id, p.token)
			}
		}
	}
}
