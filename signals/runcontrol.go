package signals

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/leasebus/leasebus/lease"
)

// The owner's side of Cancel: finding this process's tenure of a thread and
// cancelling the run that holds it (see Runtime.Cancel and the Control
// section of the package documentation). A session calls ctlStarting,
// ctlRunStarted, ctlRunEnded and ctlEnded at the points of its loop where a
// run is about to start, starts, ends, and where the tenure ends.

// localSession returns this process's tenure of thread, nil when none.
func (rt *Runtime) localSession(thread string) *session {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.sessions[thread]
}

// cancelLocal applies a cancel of thread to this process's tenure and calls
// reply exactly once with the outcome: at once, or (during a hand-off) when
// the next run starts or the tenure ends.
func (rt *Runtime) cancelLocal(thread string, cause error, drop string, reply func(cancelAnswer)) {
	s := rt.localSession(thread)
	if s == nil {
		reply(cancelAnswer{outcome: outcomeGone})
		return
	}
	s.requestCancel(cause, drop, reply)
}

// cancelLocalWait is cancelLocal that waits for the answer or ctx.
func (rt *Runtime) cancelLocalWait(ctx context.Context, thread string, cause error, drop string) (cancelAnswer, error) {
	ch := make(chan cancelAnswer, 1)
	rt.cancelLocal(thread, cause, drop, func(a cancelAnswer) { ch <- a })
	select {
	case a := <-ch:
		return a, nil
	case <-ctx.Done():
		return cancelAnswer{}, fmt.Errorf("%w: the hand-off of thread %q did not start its next run in time: %w", ErrUnreachable, thread, ctx.Err())
	}
}

// runControl is the cancel state of a session, guarded by session.mu.
type runControl struct {
	cancel   context.CancelCauseFunc // of the run whose agent is running; nil when none
	runID    string
	token    uint64
	starting bool                 // a delivery was taken for a run that has not started (a hand-off)
	pending  error                // cause to cancel that run with as it starts
	waiters  []func(cancelAnswer) // answers owed once it started
	ended    bool
	// drops holds the ids of the drop marks whose requests came and that
	// were not read yet: while any is there, deliveries are dropped (each
	// is before the latest of them). Several Cancels with DropQueued may
	// come in any order, whatever the order of their marks in the inbox.
	drops map[string]bool
}

// requestCancel cancels the session's running run, or the one it is
// starting, and calls reply with the outcome.
func (s *session) requestCancel(cause error, drop string, reply func(cancelAnswer)) {
	select {
	case <-s.ready:
	default:
		reply(cancelAnswer{outcome: outcomeGone}) // still acquiring: not the holder yet
		return
	}
	if !s.acquired {
		reply(cancelAnswer{outcome: outcomeGone})
		return
	}
	s.mu.Lock()
	c := &s.ctl
	switch {
	case c.ended:
		s.mu.Unlock()
		reply(cancelAnswer{outcome: outcomeGone})
		return
	case drop != "" && !s.ranHere(drop) && !markTooOld(drop, time.Now(), s.rt.cfg.dedup):
		// A mark already read (by this tenure, or recorded by an earlier
		// one) ends no drop any more: everything before it was handled.
		// So does one older than half the dedupe window: the record that
		// kept it may have expired (markTooOld).
		if c.drops == nil {
			c.drops = make(map[string]bool)
		}
		c.drops[drop] = true
	}
	switch {
	case c.cancel != nil:
		cancel, a := c.cancel, cancelAnswer{outcome: outcomeCancelled, runID: c.runID, token: c.token}
		s.mu.Unlock()
		cancel(cause)
		s.rt.emit(Event{Kind: Cancelled, Thread: s.thread, RunID: a.runID, Token: a.token, Err: cause})
		reply(a)
	case c.starting:
		if c.pending == nil {
			c.pending = cause
		}
		c.waiters = append(c.waiters, reply)
		s.mu.Unlock()
		s.rt.emit(Event{Kind: Cancelled, Thread: s.thread, Err: cause})
	default:
		s.mu.Unlock()
		reply(cancelAnswer{outcome: outcomeNoRun})
	}
}

// ctlStarting records that a delivery was taken for a new run.
func (s *session) ctlStarting() {
	s.mu.Lock()
	s.ctl.starting = true
	s.mu.Unlock()
}

// ctlRunStarted registers the run whose agent is about to be called, and
// cancels it at once when a cancel came during its hand-off.
func (s *session) ctlRunStarted(cancel context.CancelCauseFunc, runID string, token uint64) {
	s.mu.Lock()
	c := &s.ctl
	c.starting = false
	c.cancel, c.runID, c.token = cancel, runID, token
	cause, waiters := c.pending, c.waiters
	c.pending, c.waiters = nil, nil
	s.mu.Unlock()
	if cause == nil {
		return
	}
	cancel(cause)
	s.rt.emit(Event{Kind: Cancelled, Thread: s.thread, RunID: runID, Token: token, Err: cause})
	for _, w := range waiters {
		w(cancelAnswer{outcome: outcomeCancelled, runID: runID, token: token})
	}
}

// ctlRunEnded records that the run's agent returned.
func (s *session) ctlRunEnded() {
	s.mu.Lock()
	s.ctl.cancel = nil
	s.mu.Unlock()
}

// ctlEnded records that the session is over and answers the cancels still
// waiting for a run to start.
func (s *session) ctlEnded() {
	s.mu.Lock()
	c := &s.ctl
	c.ended, c.cancel, c.pending = true, nil, nil
	waiters := c.waiters
	c.waiters = nil
	s.mu.Unlock()
	for _, w := range waiters {
		w(cancelAnswer{outcome: outcomeGone})
	}
}

// cancelledOnly reports whether a run's ctx ended only because Cancel
// cancelled it: its lease is still held and the runtime is not stopping it.
// Such a run's signals count as done and the session goes on.
func (s *session) cancelledOnly(ctx context.Context, held *lease.Held) bool {
	return errors.Is(context.Cause(ctx), ErrCancelled) && held.Err() == nil && s.rt.hardCtx.Err() == nil
}

// dropped handles the deliveries of a drop: a drop mark is recorded as run
// and acked (ending its drop); while a drop is on (a mark whose request came
// is not read yet), a signal is recorded as done and acked without running.
// It reports whether d was handled.
func (s *session) dropped(d delivery) bool {
	if d.ev.Type == dropMarkType {
		s.mu.Lock()
		delete(s.ctl.drops, d.ev.ID)
		held := s.held
		s.mu.Unlock()
		// Recorded as run, like a signal: a cancel request that arrives
		// after its mark was read (here or in an earlier tenure) then
		// starts no drop, and the mark's wake notice is settled.
		s.complete(held, []delivery{d})
		return true
	}
	s.mu.Lock()
	for id := range s.ctl.drops {
		if s.ranHere(id) {
			delete(s.ctl.drops, id) // its mark was read before the request came
		}
	}
	drop, held, runID := len(s.ctl.drops) > 0, s.held, s.runID
	s.mu.Unlock()
	if !drop {
		return false
	}
	s.complete(held, []delivery{d})
	s.rt.emit(Event{Kind: SignalSkipped, Thread: s.thread, RunID: runID, Owner: held.Owner(), Signals: []Signal{toSignal(d.ev)}})
	return true
}

// dropPending reports whether a drop is on: a mark whose request came is
// not read yet. A mark read already (here or by an earlier tenure), or one
// older than half the dedupe window (markTooOld: its request would start
// no drop any more), ends its drop here, so that a mark that never comes
// (its inbox deleted) holds the tenure no longer than that.
func (s *session) dropPending() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	for id := range s.ctl.drops {
		if s.ranHere(id) || markTooOld(id, now, s.rt.cfg.dedup) {
			delete(s.ctl.drops, id)
		}
	}
	return len(s.ctl.drops) > 0
}

// markPrefix starts every drop mark's ID.
const markPrefix = "cancel-mark-"

// newMarkID returns a new drop mark ID: markPrefix, "t" and the time the
// mark is made in Unix milliseconds, "-" and a random UUID. (Older versions
// made markPrefix and a UUID, which never starts with "t".)
func newMarkID(now time.Time) string {
	return markPrefix + "t" + strconv.FormatInt(now.UnixMilli(), 10) + "-" + uuid.NewString()
}

// markTooOld reports whether the drop mark id was made more than half of
// window (the dedupe window) before now, by the clocks of the process that
// made it and of this one. The done record that holds a mark once it is read
// lives at least window after the mark was made: a request younger than
// half of it finds its mark there when the mark was read, with up to half
// the window of clock skew. An older request starts no drop (Cancel stopped
// waiting for it long ago: its default wait is DefaultControlTimeout), so
// that a drop is never started for a mark that can no longer be told read.
// A mark ID without a time (made by an older version) is never too old.
func markTooOld(id string, now time.Time, window time.Duration) bool {
	rest, ok := strings.CutPrefix(id, markPrefix+"t")
	if !ok {
		return false
	}
	ms, _, ok := strings.Cut(rest, "-")
	if !ok {
		return false
	}
	at, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		return false
	}
	return now.Sub(time.UnixMilli(at)) > window/2
}
