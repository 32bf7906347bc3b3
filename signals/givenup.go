package signals

import (
	"context"
	"time"
)

// A given-up acquire is one whose outcome was unknown (its reply was lost:
// a timeout, a cut connection, its ctx ended after it was sent) and that
// settleAcquire stopped settling: it tried the lease for the same owner for
// a TTL without getting it, or found it held by someone else. Redis may
// still run it later: a server that stopped answering (SIGSTOP, a VM
// paused, a network that black-holed the connection and then healed) runs
// the commands written to it before it stopped once it answers again, also
// after the client closed the connection. Such an acquire leases the thread
// to a run that never starts. Before, the thread then waited a whole TTL: a
// later Send from this process reported Forwarded to its own dead run, one
// from a peer ran only once that lease lapsed
// (TestLateAcquireAfterSettleIsAdopted).
//
// So this process remembers the owners of its given-up acquires per thread,
// and takes such a lease over for the run it was for (wakeAs: an acquire
// for the same owner, which the lease grants, keeping its token): when one
// of its own tries of the thread finds it held by such an owner (a Send, a
// notice handler, the lapse watch), and when the fan-out watch sees a wake
// notice whose Send was forwarded to such an owner (a peer's Send). The
// tenure that starts reads the inbox and releases the thread when nothing
// waits. Owners are unique per run (Runtime.newRun), so a lease of another
// runtime is never taken for one of this runtime's, even when both use the
// same WithProcessID.
//
// State: up to givenUpPerThread owners per thread, each from the settle's
// end until its lease was taken over or for givenUpFor, in a map of at most
// givenUpMax threads (beyond it the oldest entry is forgotten). A late
// acquire this process no longer remembers leaves the thread to wait for
// its lease's TTL, as before. The map is empty unless acquires were given
// up, which takes a server that stopped answering for longer than a TTL.
type givenUpLease struct {
	runID, owner string
	at           time.Time // when the settle gave up
}

const (
	givenUpFor       = 10 * time.Minute
	givenUpMax       = 10000
	givenUpPerThread = 4
)

// noteGivenUp remembers that the acquire of thread's lease for owner (run
// runID) was given up.
func (rt *Runtime) noteGivenUp(thread, runID, owner string, now time.Time) {
	rt.guMu.Lock()
	defer rt.guMu.Unlock()
	if rt.givenUp == nil {
		rt.givenUp = make(map[string][]givenUpLease)
	}
	if _, ok := rt.givenUp[thread]; !ok && len(rt.givenUp) >= givenUpMax {
		rt.sweepGivenUp(now)
	}
	if _, ok := rt.givenUp[thread]; !ok && len(rt.givenUp) >= givenUpMax {
		// Still full: forget the thread whose newest entry is oldest.
		var oldest string
		var at time.Time
		for th, l := range rt.givenUp {
			if t := l[len(l)-1].at; oldest == "" || t.Before(at) {
				oldest, at = th, t
			}
		}
		delete(rt.givenUp, oldest)
	}
	l := rt.givenUp[thread]
	if len(l) >= givenUpPerThread {
		l = append(l[:0], l[1:]...)
	}
	rt.givenUp[thread] = append(l, givenUpLease{runID: runID, owner: owner, at: now})
	rt.guLen.Store(int64(len(rt.givenUp)))
}

// sweepGivenUp forgets the entries older than givenUpFor. rt.guMu is held.
func (rt *Runtime) sweepGivenUp(now time.Time) {
	for th, l := range rt.givenUp {
		keep := l[:0]
		for _, g := range l {
			if now.Sub(g.at) < givenUpFor {
				keep = append(keep, g)
			}
		}
		if len(keep) == 0 {
			delete(rt.givenUp, th)
		} else {
			rt.givenUp[th] = keep
		}
	}
}

// givenUpRun returns the run of a given-up acquire of thread's lease for
// owner, if this process remembers one.
func (rt *Runtime) givenUpRun(thread, owner string, now time.Time) (runID string, ok bool) {
	if owner == "" || rt.guLen.Load() == 0 {
		return "", false
	}
	rt.guMu.Lock()
	defer rt.guMu.Unlock()
	for _, g := range rt.givenUp[thread] {
		if g.owner == owner && now.Sub(g.at) < givenUpFor {
			return g.runID, true
		}
	}
	return "", false
}

// hasGivenUp reports whether this process remembers a given-up acquire of
// thread's lease.
func (rt *Runtime) hasGivenUp(thread string, now time.Time) bool {
	if rt.guLen.Load() == 0 {
		return false
	}
	rt.guMu.Lock()
	defer rt.guMu.Unlock()
	for _, g := range rt.givenUp[thread] {
		if now.Sub(g.at) < givenUpFor {
			return true
		}
	}
	return false
}

// forgetGivenUp forgets the given-up acquire of thread's lease for owner:
// its lease was taken over.
func (rt *Runtime) forgetGivenUp(thread, owner string) {
	if rt.guLen.Load() == 0 {
		return
	}
	rt.guMu.Lock()
	defer rt.guMu.Unlock()
	l := rt.givenUp[thread]
	for i, g := range l {
		if g.owner == owner {
			l = append(l[:i], l[i+1:]...)
			break
		}
	}
	if len(l) == 0 {
		delete(rt.givenUp, thread)
	} else {
		rt.givenUp[thread] = l
	}
	rt.guLen.Store(int64(len(rt.givenUp)))
}

// adoptLate takes thread over when a wake notice says its Send was
// forwarded to owner and owner is the run of one of this process's given-up
// acquires (onWatch): in the background, one try at a time per thread,
// bounded by a TTL and by Close giving up. The try is wake's: it finds the
// lease held by that owner and takes it over, or finds it free and takes
// it, or finds another owner and leaves it.
//
// With owner "" it tries whenever this process remembers a given-up
// acquire or hand-off of thread (a tenure of it ended with its lease lost:
// a hand-off whose reply was lost may have moved the lease to a run that
// never starts).
func (rt *Runtime) adoptLate(thread, owner string) {
	if owner == "" {
		if !rt.hasGivenUp(thread, time.Now()) {
			return
		}
	} else if _, ok := rt.givenUpRun(thread, owner, time.Now()); !ok {
		return
	}
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
		if s, _, _, err := rt.wake(ctx, thread, true); err == nil && s != nil {
			s.kick()
		}
	}()
}
