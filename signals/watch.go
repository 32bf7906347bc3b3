package signals

import (
	"context"
	"time"
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
// A first delivery follows only a watcher that is active, and the watcher
// then owes it one try of the thread's lease after it came: at its next
// check, or as it leaves (settleOwed). With the check a releasing tenure
// makes of its inbox (Runtime.afterRelease) that is enough for a signal
// sent to a tenure that is ending: one released before the notice came is
// taken by that try, one released after finds the signal itself; either
// way it runs without waiting for a recovery interval, at one check per
// watch rather than a poll per notice (TestWatcherDoneCoversFollowers,
// TestFollowerNearWatchEnd, TestStreamToBusyThreadChecks).
//
// An entry lives while a watcher handles a notice of its thread, and then
// until it is swept (beyond watchSweepMin entries, those whose last check
// is older than the recovery interval), by an insert that doubled the map
// since the last sweep or the first one a recovery interval after it
// (review h59: before, only the doubling one, so a burst's entries and
// their done records stayed while fewer new threads came): the map holds
// the threads checked within about a recovery interval, at most one active
// per handler slot, as long as new threads come.
type threadWatch struct {
	active  bool      // a handler watches the thread now
	rec     string    // the thread's done record as a watcher last read it
	checked time.Time // when a watcher last read it (zero: never)
	// owed: a follower's first delivery came after the active watcher's
	// latest try of the thread's lease began; the watcher owes it one more
	// try before it leaves (see followNotice).
	owed bool
}

// watchSweepMin is the size of the watch map below which it is not swept.
const watchSweepMin = 1024

// watchThread makes the caller the watcher of thread and returns true, or
// returns false when the caller must follow: another handler of this
// process watches the thread, or (on a later delivery, retry set) a
// watcher checked it less than half a recovery interval before now. A
// first delivery that follows an active watcher makes it owe a try of the
// lease after now (settled by watchTrying or reported by unwatchThread):
// if the signal was sent to a tenure that was ending, and that tenure
// released before the notice was published, that try takes the thread; if
// it released after, it finds the signal itself (Runtime.afterRelease).
func (rt *Runtime) watchThread(thread string, retry bool, now time.Time) bool {
	rt.watchMu.Lock()
	defer rt.watchMu.Unlock()
	w := rt.watching[thread]
	if w != nil && w.active {
		if !retry {
			// Owed in the same step that makes the caller follow: the
			// watcher cannot leave in between without paying it.
			w.owed = true
		}
		return false
	}
	if w != nil && retry && now.Sub(w.checked) < rt.cfg.recovery/2 {
		return false
	}
	if w == nil {
		if rt.watching == nil {
			rt.watching = make(map[string]*threadWatch)
		}
		if len(rt.watching) >= watchSweepMin && (len(rt.watching) >= rt.watchSweepAt || now.Sub(rt.watchSwept) > rt.cfg.recovery) {
			for k, e := range rt.watching {
				if !e.active && now.Sub(e.checked) > rt.cfg.recovery {
					delete(rt.watching, k)
				}
			}
			rt.watchSweepAt, rt.watchSwept = 2*len(rt.watching), now
		}
		w = &threadWatch{}
		rt.watching[thread] = w
	}
	w.active, w.owed = true, false
	return true
}

// watchTrying records that the watcher of thread is about to try its lease:
// that settles what followers that came so far were owed.
func (rt *Runtime) watchTrying(thread string) {
	rt.watchMu.Lock()
	if w := rt.watching[thread]; w != nil && w.active {
		w.owed = false
	}
	rt.watchMu.Unlock()
}

// unwatchThread ends the caller's watch of thread and reports whether it
// still owes followers a try of the lease. The entry stays while its last
// check is recent (see threadWatch).
func (rt *Runtime) unwatchThread(thread string) (owed bool) {
	rt.watchMu.Lock()
	defer rt.watchMu.Unlock()
	w := rt.watching[thread]
	if w == nil {
		return false
	}
	owed = w.owed
	w.active, w.owed = false, false
	if w.checked.IsZero() {
		delete(rt.watching, thread)
	}
	return owed
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
func (rt *Runtime) followNotice(thread, id, noticeID string, received time.Time) error {
	rt.mu.Lock()
	s := rt.sessions[thread]
	rt.mu.Unlock()
	if rt.done.has(thread, id) || rt.settledByTenures(thread, received) || rt.watchedDone(thread, id, time.Now()) {
		// Done, perhaps by the local tenure, whose run puts it in the
		// done cache before its inbox ack is queued (review h68:
		// TestReviewH68FollowerDoneWaitsForInboxAck).
		return rt.followAck(s, id)
	}
	if s != nil {
		s.kickFor(noticeID, byNotice)
		if s.ranHereNow(id) {
			return rt.followAck(s, id)
		}
	}
	return errRetry
}

// followAck settles a follower's notice of signal id, known to be done:
// nil when no inbox delivery of id to s, the local tenure (nil: none), has
// its ack unfinished (session.awaitAck), so that the notice is acked after
// the inbox entry; errRetry (back after the recovery interval) otherwise.
// It does not wait: only the thread's watcher holds a handler slot, for
// noticeHold at most (review h68: a follower waited up to a second for a
// slow inbox master: TestReviewH68FollowerHoldsNoSlot).
func (rt *Runtime) followAck(s *session, id string) error {
	if s == nil || s.awaitAck(id, expired, rt.closing) {
		return nil
	}
	return errRetry
}

// expired is a timer channel that has fired: a wait on it does not wait.
var expired = func() <-chan time.Time {
	ch := make(chan time.Time)
	close(ch)
	return ch
}()

// settleOwed makes the try of thread's lease that the leaving watcher owed
// its followers (unwatchThread): it takes the thread when it is free, or
// kicks the local tenure. On failure the followers' notices come back after
// the recovery interval.
func (rt *Runtime) settleOwed(ctx context.Context, thread string) {
	if rt.closingNow() || ctx.Err() != nil {
		return // closing: the notices are handed back
	}
	if s, _, _, err := rt.wake(ctx, thread, true); err == nil && s != nil {
		s.kick()
	}
}

// afterRelease runs as a tenure that released its thread's lease ends. A
// signal published to the inbox while the tenure was ending (after it
// stopped reading, before its release) was sent to a holder that reads
// nothing more: its Send reported the thread held. So the tenure looks at
// the inbox once more now that the lease is free, and when something waits
// in it, this process takes the thread again (a Recovered tenure; whoever
// took it meanwhile reads the inbox instead). A signal whose notice came
// after the release is taken by the try its notice's handler makes after
// it came (the watcher's, for a follower). Together, that runs a signal
// sent to an ending tenure without waiting for a recovery interval, however
// long the release took (TestFollowerReleaseAfterWatchLeft). It costs one
// script per released tenure (delete_drained.lua on redisstreams, which
// also deletes the inbox when nothing came), and a backlog read when the
// inbox was not deleted (so that an inbox kept for another reason, such as
// another consumer group on it, does not restart tenures for nothing).
func (rt *Runtime) afterRelease(thread string) {
	if rt.closingNow() {
		return // Close hands the notices back; the next owner reads the inbox
	}
	ctx, cancel := context.WithTimeout(rt.hardCtx, rt.cfg.ttl)
	defer cancel()
	if rt.dd != nil {
		gone, err := rt.dd.DeleteTopicIfDrained(ctx, InboxTopic(thread), InboxGroup)
		if err != nil || gone {
			return
		}
		// Not deleted: something waits, or the inbox is kept for another
		// reason (another group on it, say), which the backlog tells.
	}
	rt.wakeIfWaiting(ctx, thread)
}

// wakeIfWaiting takes thread, if it is free, and has the new tenure read
// its inbox when the backlog says a signal waits there (or, without
// pubsub.BacklogReader, when the inbox could not be deleted as drained).
func (rt *Runtime) wakeIfWaiting(ctx context.Context, thread string) {
	if rt.closingNow() {
		return
	}
	if rt.br == nil {
		if rt.dd == nil {
			return
		}
	} else if bl, err := rt.br.GroupBacklog(ctx, InboxTopic(thread), InboxGroup); err != nil || bl.Lag <= 0 && bl.Pending <= 0 {
		// (A Lag of -1, "cannot tell", with nothing pending counts as
		// nothing waiting: starting a tenure on every such answer would
		// never end on an idle thread. Such a signal's notice takes the
		// thread within a recovery interval.)
		return
	}
	if s, _, _, err := rt.wake(ctx, thread, true); err == nil && s != nil {
		s.kick()
	}
}
