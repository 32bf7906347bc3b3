package signals_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

// TestReviewH69StragglerReleaseCopyRunsTwice (review h69): the takeover of
// a late acquire "for that run" (givenup.go) can start a run of A twice,
// as two tenures of one lease owner (TestReviewH69LateStragglerStartsRunTwice).
// The lease scripts fence release (and transfer) by the owner string alone
// (redisstreams/lua/release.lua), so a late copy of the first tenure's
// release deletes the second tenure's lease while its run is live, and a
// peer then runs the thread at the same time.
//
// Scene (TTL 3s): A's Send of s1 loses its acquire's reply and its
// settle's (owner O of run R). A first late copy of the acquire leases the
// thread to O; B's Send of s2 is forwarded there; A takes it over, runs s2
// as R and releases (release #1, owner O). A second late copy leases the
// thread to O again; B's Send of s3: A takes it over again, as R again,
// and its agent holds s3. Then a copy of release #1 reaches Redis late: a
// copy go-redis sent first and re-sent after a timeout (MaxRetries; lease
// batches are re-sent whole, TestBatchedForceRevokeRunsOnceBesideMigratingCall)
// on a connection a black hole held, as givenup.go describes for acquires
// ("each connection's bytes may come in at a different time"). The test
// runs that copy itself, with a client of its own, the same script for the
// same owner. Then B's Send of s4.
//
// doc.go, guarantee 1: "One owner: the lease admits one holder; each run is
// a new tenure with a higher token and its ctx ends when the lease is
// lost"; guarantee 6: the run ctx "is cancelled as soon as renewal is
// refused". It asserts that B's run of s3 (or of anything on the thread)
// does not start while A's run holding s3 has a live ctx.
func TestReviewH69StragglerReleaseCopyRunsTwice(t *testing.T) {
	t.Parallel()
	const th = "h69rel-thread"
	const ttl = 3 * time.Second
	srv, rc := startRedis(t)
	ctx := context.Background()
	hook := &loseAcquires{thread: th}

	type run struct {
		proc, id string
		token    uint64
		sigs     []string
		start    time.Time
		end      time.Time // ctx cancelled or returned
	}
	var mu sync.Mutex
	var runs []*run
	ran := map[string]int{}
	release := make(chan struct{})
	agent := func(proc string) signals.Agent {
		return func(rctx context.Context, r *signals.Run) error {
			x := &run{proc: proc, id: r.ID, token: r.Token, start: time.Now()}
			hold := false
			for _, s := range r.Signals {
				x.sigs = append(x.sigs, s.ID)
				if s.ID == "s3" {
					// Held by whichever process runs it: since the fix, R's
					// second late lease is released and the thread taken for
					// a new run, which B's Send of s3 may win under load.
					hold = true
				}
			}
			mu.Lock()
			if r.Thread == th {
				runs = append(runs, x)
			}
			for _, s := range x.sigs {
				ran[s]++
			}
			mu.Unlock()
			if hold {
				select {
				case <-rctx.Done():
				case <-release:
				}
			}
			mu.Lock()
			x.end = time.Now()
			mu.Unlock()
			return nil
		}
	}
	opts := []signals.Option{signals.WithLeaseTTL(ttl), signals.WithRecoveryInterval(ttl / 10), signals.WithLinger(ttl / 30)}
	a, _ := urlRuntime(t, srv.URL(), "h69rel", "A", agent("A"), hook, opts...)
	b, _ := urlRuntime(t, srv.URL(), "h69rel", "B", agent("B"), nil, opts...)
	defer close(release)
	ranOf := func(id string) int {
		mu.Lock()
		defer mu.Unlock()
		return ran[id]
	}
	for i, rt := range []*signals.Runtime{a, b} {
		id := []string{"warm-a", "warm-b"}[i]
		if _, err := rt.Send(ctx, id, signals.Signal{ID: id, Type: "t"}); err != nil {
			t.Fatal(err)
		}
		revWaitFor(t, "warm "+id, 5*time.Second, func() bool { return ranOf(id) > 0 })
	}
	look, err := redisstreams.NewURL(ctx, srv.URL(), redisstreams.Options{Prefix: "h69rel"})
	if err != nil {
		t.Fatal(err)
	}
	defer look.Close()
	ownerOf := func() string {
		o, err := look.GetLeaseOwner(ctx, signals.LeaseKey(th))
		if err != nil {
			t.Fatal(err)
		}
		return o
	}

	// s1: the acquire's reply lost, and the settle's.
	hook.armed.Store(true)
	sctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err = a.Send(sctx, th, signals.Signal{ID: "s1", Type: "t"})
	cancel()
	t.Logf("Send s1 with its acquire's reply lost: %v", err)
	settleOver(t, a, th, ttl)
	hook.armed.Store(false)
	owner, lost := hook.snapshot()
	if len(lost) < 2 {
		t.Fatalf("premise: want at least two acquires of unknown outcome, got %d", len(lost))
	}
	revWaitFor(t, "thread free after s1", 3*ttl, func() bool { return ownerOf() == "" })
	replay := func(cmd []any) {
		if err := rc.Do(ctx, cmd...).Err(); err != nil {
			t.Fatal(err)
		}
		if o := ownerOf(); o != owner {
			t.Fatalf("premise: after the late acquire the owner is %q, want %q", o, owner)
		}
	}

	// First copy: taken over for R, which runs s2 and releases.
	replay(lost[0])
	if _, err := b.Send(ctx, th, signals.Signal{ID: "s2", Type: "t"}); err != nil {
		t.Fatal(err)
	}
	revWaitFor(t, "s2 ran", 2*time.Second, func() bool { return ranOf("s2") > 0 })
	revWaitFor(t, "R's first tenure released", 3*ttl, func() bool { return ownerOf() == "" })

	// Second copy: taken over again, for R again; A's agent holds s3.
	replay(lost[len(lost)-1])
	if _, err := b.Send(ctx, th, signals.Signal{ID: "s3", Type: "t"}); err != nil {
		t.Fatal(err)
	}
	revWaitFor(t, "s3 running", 2*time.Second, func() bool { return ranOf("s3") > 0 })
	t.Logf("the run holding s3 has the lease as %q (R's owner: %s)", ownerOf(), owner)

	// The late copy of R's first release.
	if err := look.ReleaseLease(ctx, signals.LeaseKey(th), owner); err != nil {
		t.Fatalf("the late release copy: %v", err)
	}
	lateRelease := time.Now()
	t.Logf("a late copy of R's first release ran; the thread's owner is now %q", ownerOf())
	if _, err := b.Send(ctx, th, signals.Signal{ID: "s4", Type: "t"}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(ttl)

	mu.Lock()
	defer mu.Unlock()
	var aRun *run
	for _, r := range runs {
		t.Logf("run %s on %s token %d signals %v: %+.3fs..%+.3fs from the late release",
			r.id, r.proc, r.token, r.sigs, r.start.Sub(lateRelease).Seconds(), r.end.Sub(lateRelease).Seconds())
		if len(r.sigs) > 0 && r.sigs[0] == "s3" {
			aRun = r
		}
	}
	if aRun == nil {
		t.Fatal("premise: no run with s3")
	}
	for _, r := range runs {
		if r == aRun || r.start.Before(aRun.start) {
			continue
		}
		if aRun.end.IsZero() || r.start.Before(aRun.end) {
			t.Errorf("run %s on %s (token %d, signals %v) started %+.3fs from the late release while the run %s (token %d, holding s3) was live (its ctx ended %+.3fs from it)",
				r.id, r.proc, r.token, r.sigs, r.start.Sub(lateRelease).Seconds(), aRun.id, aRun.token, aRun.end.Sub(lateRelease).Seconds())
		}
	}
}
