package signals

import (
	"context"
	"time"

	"github.com/leasebus/leasebus/internal/backoff"
)

// threadWatch coordinates this process's handlers of one thread's wake
// notices, so that the cost of notices of a busy thread is per thread, not
// per notice. One handler at a time, the watcher, waits on the thread (on
// its local tenure, or checking its done record and trying its lease with
// the backoff of handleNotice); the others, the followers, settle their
// notice from what is known in this process without a round trip (this
// process's done cache, its tenures, the local tenure's record, the record
// as a watcher last read it) and otherwise nack it at once, to come back
// after the recovery interval. A notice that comes back (a later delivery)
// also follows when a watcher checked the thread less than half a recovery
// interval ago. So thousands of signals queued behind long runs hold one
// handler slot per thread, not one per notice, and cost about two checks
// per thread per recovery interval, not one per notice: a dead owner's
// notice finds a free slot at once (TestProcTakeoverBehindBigBacklog,
// TestBusyThreadNoticesCheckedPerThread).
//
// A first delivery follows only a watcher that is active: that one polls
// the thread again from 2ms, taking the lease the moment it is free, for
// up to noticeHold after the follower's arrival as well (at most twice
// noticeHold in all), also once its own signal is done (coverFollowers), so
// a signal sent to a tenure that is ending is still run without waiting for
// a recovery interval.
//
// An entry lives while a watcher handles a notice of its thread, and then
// until it is swept (beyond watchSweepMin entries, those whose last check
// is older than the recovery interval): the map holds the threads checked
// within about a recovery interval, at most one active per handler slot.
type threadWatch struct {
	active  bool      // a handler watches the thread now
	rec     string    // the thread's done record as a watcher last read it
	checked time.Time // when a watcher last read it (zero: never)
	// start and until bound the active watcher's hold: from start until
	// until, which a follower's first delivery pushes to its own arrival
	// plus noticeHold (at most start + 2 × noticeHold of a first delivery).
	start, until time.Time
	// followed is until as followers' first deliveries pushed it (zero
	// when none came): how long coverFollowers goes on for them.
	followed time.Time
	// kick tells the active watcher that a follower's first delivery came:
	// it polls again from noticePollFirst.
	kick chan struct{}
}

// watchSweepMin is the size of the watch map below which it is not swept.
const watchSweepMin = 1024

// watchThread makes the caller the watcher of thread and returns true, or
// returns false when the caller must follow: another handler of this
// process watches the thread, or (on a later delivery, retry set) a
// watcher checked it less than half a recovery interval before now.
func (rt *Runtime) watchThread(thread string, retry bool, now time.Time, hold time.Duration) (kick <-chan struct{}, ok bool) {
	rt.watchMu.Lock()
	defer rt.watchMu.Unlock()
	w := rt.watching[thread]
	if w != nil && (w.active || retry && now.Sub(w.checked) < rt.cfg.recovery/2) {
		return nil, false
	}
	if w == nil {
		if rt.watching == nil {
			rt.watching = make(map[string]*threadWatch)
		}
		if len(rt.watching) >= max(rt.watchSweepAt, watchSweepMin) {
			for k, e := range rt.watching {
				if !e.active && now.Sub(e.checked) > rt.cfg.recovery {
					delete(rt.watching, k)
				}
			}
			rt.watchSweepAt = 2 * len(rt.watching)
		}
		w = &threadWatch{}
		rt.watching[thread] = w
	}
	w.active, w.start, w.until, w.followed = true, now, now.Add(hold), time.Time{}
	w.kick = make(chan struct{}, 1)
	return w.kick, true
}

// watchExtended returns how much longer than its own hold the watcher of
// thread is to hold its notice at now: followers' first deliveries extended
// it (0: not).
func (rt *Runtime) watchExtended(thread string, now time.Time) time.Duration {
	rt.watchMu.Lock()
	defer rt.watchMu.Unlock()
	if w := rt.watching[thread]; w != nil && w.active {
		return max(w.until.Sub(now), 0)
	}
	return 0
}

// unwatchThread ends the caller's watch of thread. The entry stays while
// its last check is recent (see threadWatch).
func (rt *Runtime) unwatchThread(thread string) {
	rt.watchMu.Lock()
	if w := rt.watching[thread]; w != nil {
		w.active = false
		if w.checked.IsZero() {
			delete(rt.watching, thread)
		}
	}
	rt.watchMu.Unlock()
}

// watchedRecord stores rec, read at now, as the latest read of thread's
// done record, when a watcher watches the thread.
func (rt *Runtime) watchedRecord(thread, rec string, now time.Time) {
	rt.watchMu.Lock()
	if w := rt.watching[thread]; w != nil && w.active {
		w.rec, w.checked = rec, now
	}
	rt.watchMu.Unlock()
}

// watchedDone reports whether the latest read of thread's done record by
// a watcher within the last recovery interval holds id (an older read
// could still show a signal that left the record since and, sent again,
// is to run again).
func (rt *Runtime) watchedDone(thread, id string, now time.Time) bool {
	rt.watchMu.Lock()
	var rec string
	if w := rt.watching[thread]; w != nil && now.Sub(w.checked) < rt.cfg.recovery {
		rec = w.rec
	}
	rt.watchMu.Unlock()
	return rec != "" && recordHas(rec, id)
}

// followNotice settles a notice of a thread that another handler of this
// process watches, from what this process knows, without a round trip: nil
// when the signal is known to be done, errRetry (a nack, back after the
// recovery interval) otherwise. It kicks the local tenure, if any, as the
// watcher does: the notice may be its only news of the signal.
func (rt *Runtime) followNotice(thread, id string, received time.Time, first bool) error {
	if rt.done.has(thread, id) || rt.settledByTenures(thread, received) || rt.watchedDone(thread, id, time.Now()) {
		return nil
	}
	if first {
		// The watcher polls on for as long as this notice's own hold
		// would have: a signal sent to a tenure that is ending is taken
		// the moment it was released.
		hold := noticeHold(rt.cfg, 1)
		rt.watchMu.Lock()
		if w := rt.watching[thread]; w != nil && w.active {
			until := received.Add(hold)
			if limit := w.start.Add(2 * hold); until.After(limit) {
				until = limit
			}
			if until.After(w.until) {
				w.until = until
			}
			if until.After(w.followed) {
				w.followed = until
			}
			select {
			case w.kick <- struct{}{}:
			default:
			}
		}
		rt.watchMu.Unlock()
	}
	rt.mu.Lock()
	s := rt.sessions[thread]
	rt.mu.Unlock()
	if s != nil {
		s.kick()
		if s.ranHereNow(id) {
			return nil
		}
	}
	return errRetry
}

// watchFollowed returns how much longer, at now, followers' first
// deliveries asked the watcher of thread to go on for them (0: none).
func (rt *Runtime) watchFollowed(thread string, now time.Time) time.Duration {
	rt.watchMu.Lock()
	defer rt.watchMu.Unlock()
	if w := rt.watching[thread]; w != nil && w.active && !w.followed.IsZero() {
		return max(w.followed.Sub(now), 0)
	}
	return 0
}

// coverFollowers runs when a watcher's own notice is settled while
// followers' first deliveries extended its watch (watchFollowed): it goes
// on for them as the watcher would, polling the thread from noticePollFirst
// and taking its lease the moment it is free, until the extension ends or
// a local tenure holds the thread (it reads their signals). Without it a
// follower sent to a tenure that was ending waited a recovery interval
// once the watcher's own signal was done (TestWatcherDoneCoversFollowers).
func (rt *Runtime) coverFollowers(ctx context.Context, thread string) {
	poll := backoff.Backoff{Policy: backoff.Policy{Min: noticePollFirst, Max: rt.cfg.recovery}}
	for {
		d := rt.watchFollowed(thread, time.Now())
		if d <= 0 {
			return
		}
		s, _, _, err := rt.wake(ctx, thread, true)
		if err != nil {
			return // the followers come back after the recovery interval
		}
		if s != nil {
			s.kick()
			return
		}
		wait := time.NewTimer(min(poll.Next(), d))
		select {
		case <-wait.C:
		case <-rt.closing:
			wait.Stop()
			return
		case <-ctx.Done():
			wait.Stop()
			return
		}
	}
}
