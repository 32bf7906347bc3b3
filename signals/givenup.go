package signals

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/leasebus/leasebus/lease"
)

// A given-up acquire is one whose outcome is unknown (its reply was lost: a
// timeout, a cut connection, its ctx ended after it was sent), and a
// given-up hand-off a transfer whose outcome is unknown. Redis may run
// either later: a server that stopped answering (SIGSTOP, a VM paused, a
// network that black-holed the connection and then healed) runs the
// commands written to it before it stopped once it answers again, also
// after the client closed the connection, and each connection's bytes may
// come in at a different time. Each such call leases the thread to a run
// that never starts (the acquire's, or the hand-off's next run). Before,
// the thread then waited a whole TTL: a later Send from this process
// reported Forwarded to its own dead run, one from a peer ran only once
// that lease lapsed (TestLateAcquireAfterSettleIsAdopted,
// TestHandOffReplyLostIsAdopted). A release that failed (not with
// ErrNotHeld) leaves the thread the same way, leased to a tenure whose runs
// are over (TestReleaseFailedIsTakenOver), and is remembered too, marked
// as having run (givenUpLease.ran): such a lease is released again and the
// thread taken for a new run, not taken over for its run, which would start
// that run again under its Run.ID and token (review revU: 10-34 such runs
// per TestSentinelFailoverUnderLoad/Sync run), and which a late copy of the
// failed release would delete under the takeover, letting a peer run the
// thread at the same time (review revV: TestReleaseFailedLateReleaseRunsTwice).
//
// So this process remembers, per thread, the owners of its calls with an
// unknown outcome, from the moment the outcome is unknown (a settle of the
// acquire starts: settleAcquire), and takes such a lease over for the run
// it was for (wakeAs: an acquire for the same owner, which the lease
// grants, keeping its token): when one of its own tries of the thread finds
// it held by such an owner (a Send, a notice handler, the lapse watch, a
// settle's try), when the fan-out watch sees a wake notice whose Send was
// forwarded to such an owner (a peer's Send), and when a tenure ends with
// its release failed and its lease still its own, or with its lease lost
// after a hand-off failed that way. The tenure that starts
// reads the inbox and releases the thread when nothing waits. An owner is
// not forgotten when its lease is taken over: an acquire sent several times
// for it (a Send's, then the settle's tries) may lease the thread to it
// again later (TestLateStragglerAfterTakeover): once a tenure of its run
// started, such a lease is released and the thread taken for a new run, as
// after a failed release (markGivenUpRan), not taken over for that run
// again, which started it twice under one Run.ID and owner and let a late
// copy of its first tenure's release delete the second's lease
// (TestReviewH69LateStragglerStartsRunTwice,
// TestReviewH69StragglerReleaseCopyRunsTwice: a peer ran the thread beside
// it). A
// late lease that was revoked meanwhile is released (its run never
// started) rather than taken over. Close releases the leases such owners
// hold. Owners are unique per run (Runtime.newRun), so a lease of another
// runtime is never taken for one of this runtime's, even when both use the
// same WithProcessID.
//
// State: up to givenUpPerThread owners per thread (the newest), each for
// givenUpFor after it was noted, in a map of at most givenUpMax threads
// (beyond it, expired entries are swept, then an eighth of the threads are
// forgotten, in map order). Expired entries are swept as soon as the oldest
// has expired (TestGivenUpSweptWhenExpired), so the map is empty, and costs
// the paths that consult it one atomic load, except within givenUpFor of a
// call whose outcome was unknown. A late call this process no longer
// remembers (after givenUpFor, after Close, or forgotten) leaves the thread
// to wait for its lease's TTL, as before.
type givenUpLease struct {
	runID, owner string
	at           time.Time // when it was noted
	// ran: the owner is a tenure whose release failed, whose runs ran
	// (noteReleaseFailed), or whose run started after its call's outcome
	// was unknown (markGivenUpRan). Its lease is not taken over for its run, which
	// would start that run again under the same Run.ID and fencing token
	// (a re-acquire by the same owner keeps its token): adopt releases it
	// and takes the thread for a new run.
	ran bool
}

const (
	givenUpFor       = 10 * time.Minute
	givenUpMax       = 10000
	givenUpPerThread = 4
)

// noteGivenUp remembers that a call leasing thread to owner (run runID) has
// an unknown outcome. Noting an owner again moves its entry to now.
func (rt *Runtime) noteGivenUp(thread, runID, owner string, now time.Time) {
	rt.noteGivenUpRan(thread, runID, owner, now, false)
}

// noteReleaseFailed remembers that the release of a tenure (its run runID,
// owner owner) failed: its lease may still be held by that tenure, whose
// runs are over. See givenUpLease.ran.
func (rt *Runtime) noteReleaseFailed(thread, runID, owner string, now time.Time) {
	rt.noteGivenUpRan(thread, runID, owner, now, true)
}

func (rt *Runtime) noteGivenUpRan(thread, runID, owner string, now time.Time, ran bool) {
	rt.guMu.Lock()
	defer rt.guMu.Unlock()
	if rt.givenUp == nil {
		rt.givenUp = make(map[string][]givenUpLease)
	}
	rt.sweepGivenUpDue(now)
	if _, ok := rt.givenUp[thread]; !ok && len(rt.givenUp) >= givenUpMax {
		rt.sweepGivenUp(now)
		// Still full: forget an eighth of the threads, so that the next
		// sweep comes after as many inserts (O(1) per insert).
		if len(rt.givenUp) >= givenUpMax {
			drop := givenUpMax / 8
			for th := range rt.givenUp {
				if drop == 0 {
					break
				}
				delete(rt.givenUp, th)
				drop--
			}
		}
	}
	l := rt.givenUp[thread]
	for i, g := range l {
		if g.owner == owner {
			ran = ran || g.ran
			l = append(l[:i], l[i+1:]...)
			break
		}
	}
	if len(l) >= givenUpPerThread {
		l = append(l[:0], l[1:]...)
	}
	rt.givenUp[thread] = append(l, givenUpLease{runID: runID, owner: owner, at: now, ran: ran})
	if rt.guSweepAt.IsZero() {
		rt.guSweepAt = now.Add(givenUpFor)
	}
	rt.guLen.Store(int64(len(rt.givenUp)))
}

// sweepGivenUpDue sweeps when the oldest entry may have expired. rt.guMu
// is held.
func (rt *Runtime) sweepGivenUpDue(now time.Time) {
	if !rt.guSweepAt.IsZero() && !now.Before(rt.guSweepAt) {
		rt.sweepGivenUp(now)
	}
}

// sweepGivenUp forgets the entries older than givenUpFor and sets when the
// next one expires. rt.guMu is held.
func (rt *Runtime) sweepGivenUp(now time.Time) {
	var oldest time.Time
	for th, l := range rt.givenUp {
		keep := l[:0]
		for _, g := range l {
			if now.Sub(g.at) < givenUpFor {
				keep = append(keep, g)
				if oldest.IsZero() || g.at.Before(oldest) {
					oldest = g.at
				}
			}
		}
		if len(keep) == 0 {
			delete(rt.givenUp, th)
		} else {
			rt.givenUp[th] = keep
		}
	}
	rt.guSweepAt = time.Time{}
	if !oldest.IsZero() {
		rt.guSweepAt = oldest.Add(givenUpFor)
	}
	rt.guLen.Store(int64(len(rt.givenUp)))
}

// givenUpRun returns the run of a remembered call of unknown outcome that
// leases thread to owner.
func (rt *Runtime) givenUpRun(thread, owner string, now time.Time) (runID string, ok bool) {
	if owner == "" || rt.guLen.Load() == 0 {
		return "", false
	}
	rt.guMu.Lock()
	defer rt.guMu.Unlock()
	rt.sweepGivenUpDue(now)
	for _, g := range rt.givenUp[thread] {
		if g.owner == owner && now.Sub(g.at) < givenUpFor {
			return g.runID, true
		}
	}
	return "", false
}

// markGivenUpRan marks owner, if remembered for thread, as a tenure whose
// run started (givenUpLease.ran): a later copy of its call is released
// and the thread taken for a new run (adopt), not taken over for this run
// again.
func (rt *Runtime) markGivenUpRan(thread, owner string) {
	if owner == "" || rt.guLen.Load() == 0 {
		return
	}
	rt.guMu.Lock()
	defer rt.guMu.Unlock()
	l := rt.givenUp[thread]
	for i := range l {
		if l[i].owner == owner {
			l[i].ran = true
		}
	}
}

// givenUpRan reports whether owner is remembered for thread as a tenure
// whose run started (givenUpLease.ran).
func (rt *Runtime) givenUpRan(thread, owner string, now time.Time) bool {
	if owner == "" || rt.guLen.Load() == 0 {
		return false
	}
	rt.guMu.Lock()
	defer rt.guMu.Unlock()
	for _, g := range rt.givenUp[thread] {
		if g.owner == owner && now.Sub(g.at) < givenUpFor {
			return g.ran
		}
	}
	return false
}

// hasGivenUp reports whether this process remembers a call of unknown
// outcome leasing thread.
func (rt *Runtime) hasGivenUp(thread string, now time.Time) bool {
	if rt.guLen.Load() == 0 {
		return false
	}
	rt.guMu.Lock()
	defer rt.guMu.Unlock()
	rt.sweepGivenUpDue(now)
	for _, g := range rt.givenUp[thread] {
		if now.Sub(g.at) < givenUpFor {
			return true
		}
	}
	return false
}

// adoptLate takes thread over when a wake notice says its Send was
// forwarded to owner and owner is the run of one of this process's calls of
// unknown outcome (onWatch): in the background, one try at a time per
// thread, bounded by a TTL and by Close giving up. The try is wake's: it
// finds the lease held by that owner and takes it over, or finds it free
// and takes it, or finds another owner and leaves it.
//
// With owner "" it tries whenever this process remembers such a call for
// thread (a tenure of it ended with its lease lost: a hand-off whose reply
// was lost may have moved the lease to a run that never starts).
func (rt *Runtime) adoptLate(thread, owner string) {
	if owner == "" {
		if !rt.hasGivenUp(thread, time.Now()) {
			return
		}
	} else if _, ok := rt.givenUpRun(thread, owner, time.Now()); !ok {
		return
	}
	rt.tryAdopt(thread, nil)
}

// adoptAfterFailedRelease is adoptLate for a tenure of owner whose release
// failed: it tries the thread only when the lease is still owner's (then
// adopt releases it and starts a new run). Not when it is free: the
// release may have run and lost its reply, and a tenure that started
// whenever the thread is free ended with a release that failed again as
// long as releases lost their replies, one tenure after the other with no
// signal sent (TestReleaseRepliesLostTenureLoop: 15 tenures in 10s at TTL
// 2s). A signal sent meanwhile takes the free thread as usual.
func (rt *Runtime) adoptAfterFailedRelease(thread, owner string) {
	rt.tryAdopt(thread, func(ctx context.Context) bool {
		gctx, cancel := context.WithTimeout(ctx, closeGrace)
		defer cancel()
		cur, err := rt.lp.GetLeaseOwner(gctx, LeaseKey(thread))
		return err == nil && cur == owner
	})
}

// tryAdopt tries thread in the background (adoptLate), when pre (if not
// nil) reports true.
func (rt *Runtime) tryAdopt(thread string, pre func(ctx context.Context) bool) {
	rt.mu.Lock()
	if rt.closed || rt.sessions[thread] != nil || rt.adopting[thread] {
		rt.mu.Unlock()
		return
	}
	if rt.adopting == nil {
		rt.adopting = make(map[string]bool)
	}
	rt.adopting[thread] = true
	rt.wg.Add(1)
	rt.mu.Unlock()
	go func() {
		defer rt.wg.Done()
		defer func() {
			rt.mu.Lock()
			delete(rt.adopting, thread)
			rt.mu.Unlock()
		}()
		ctx, cancel := context.WithTimeout(rt.hardCtx, rt.cfg.ttl)
		defer cancel()
		if pre != nil && !pre(ctx) {
			return
		}
		if s, _, _, err := rt.wake(ctx, thread, true); err == nil && s != nil {
			s.kick()
		}
	}()
}

// adopt takes thread's lease over for late, the run of a call of unknown
// outcome that owner (its owner) holds the lease for: wakeAs for that run.
// When that lease was revoked meanwhile (its run never started) it
// releases it and tries the thread once more for a new run.
//
// A tenure whose release failed (givenUpLease.ran) had its runs: taking its
// lease over for its run would start that run again, under the same Run.ID
// and fencing token. Its lease is released instead, and the thread tried
// for a new run, with a new, higher token.
func (rt *Runtime) adopt(ctx context.Context, thread string, recovery bool, late, owner string) (*session, bool, holderInfo, error) {
	if !rt.givenUpRan(thread, owner, time.Now()) {
		s, created, holder, err := rt.wakeAs(ctx, thread, recovery, late, owner)
		var re *lease.RevokedError
		if !errors.As(err, &re) {
			return s, created, holder, err
		}
	}
	rctx, cancel := context.WithTimeout(ctx, closeGrace)
	rerr := rt.lp.ReleaseLease(rctx, LeaseKey(thread), owner)
	cancel()
	if rerr != nil && !errors.Is(rerr, lease.ErrNotHeld) {
		rt.log.Warn("signals: releasing a late lease (revoked from a run that never started, or of a tenure whose release failed) failed; it expires after its TTL",
			"thread", thread, "owner", owner, "err", rerr)
		return nil, false, holderInfo{owner: owner}, nil
	}
	return rt.wakeAs(ctx, thread, recovery, "", "")
}

// releaseGivenUp releases, as Close ends, the leases that the remembered
// calls of unknown outcome may hold (a no-op for the others), so that the
// live runtimes take those threads at once rather than after their TTL
// (TestCloseReleasesLateLeases). All of them within one closeGrace (and
// ctx), 64 at a time (the backend batches them): on a server that stopped
// answering it adds about closeGrace to Close whatever their number
// (TestCloseOnStalledServerManyGivenUp); a lease it did not release
// expires after its TTL.
func (rt *Runtime) releaseGivenUp(ctx context.Context) {
	if rt.guLen.Load() == 0 {
		return
	}
	type entry struct{ thread, owner string }
	now := time.Now()
	var all []entry
	rt.guMu.Lock()
	for th, l := range rt.givenUp {
		for _, g := range l {
			if now.Sub(g.at) < givenUpFor {
				all = append(all, entry{th, g.owner})
			}
		}
	}
	rt.guMu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, closeGrace)
	defer cancel()
	sem := make(chan struct{}, 64)
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, e := range all {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		wg.Go(func() {
			defer func() { <-sem }()
			_ = rt.lp.ReleaseLease(ctx, LeaseKey(e.thread), e.owner)
		})
	}
}
