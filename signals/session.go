package signals

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasebus/leasebus/internal/ackhook"
	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/pubsub"
)

// A session is this process's tenure of one thread: from the acquire that
// won its lease to the release (or loss) of the lease, through any number of
// runs handed over with TransferLease. While it lasts it is the only reader
// of the thread's inbox (group InboxGroup, one delivery at a time, in order).
type session struct {
	rt        *Runtime
	thread    string
	startedAt time.Time

	ready    chan struct{} // closed when the acquire is decided
	acquired bool          // set before ready closes
	holder   holderInfo    // the other holder when not acquired
	err      error         // the acquire error

	deliveries chan delivery
	quit       chan struct{} // closed when the session takes no more deliveries
	quitOnce   sync.Once
	ended      chan struct{} // closed when the session is over
	drained    bool          // set before ended closes: it left the inbox drained and deleted it

	mu    sync.Mutex
	held  *lease.Held
	runID string
	// seen holds the IDs this tenure ran or skipped, the newest
	// DedupeEntries of them (seenOrder, oldest first from seenHead): the
	// done record and the process's cache remember beyond that.
	seen      map[string]bool
	seenOrder []string
	seenHead  int
	waiters   map[string][]chan struct{}
	// unacked counts, by signal ID, the inbox deliveries this tenure was
	// given whose ack the backend has not finished (internal/ackhook: on
	// a backend that tells, redisstreams), and ackWaiters the notice
	// handlers waiting for that (awaitAck). An entry lives from the
	// delivery until its ack is written or given up on, or its verdict
	// was not an ack: milliseconds; the session's end drops the rest.
	unacked    map[string]int
	ackWaiters map[string][]chan struct{}
	// kickedAt holds, by wake notice ID, when kickFor last kicked for a
	// signal and which sources heard of it since.
	kickedAt map[string]kickMark
	record   string
	ctl      runControl // control.go: cancel of the running run

	// inbox is the inbox subscription once Subscribe returned; kicked
	// records a kick that came before, passed on as it is set.
	inbox  pubsub.Subscription
	kicked bool

	// sending counts Sends whose acquire started this tenure and whose
	// publish of the signal has not returned yet: the tenure does not end
	// for want of deliveries while one is out (its signal is coming).
	sending atomic.Int32
}

// delivery is one inbox event waiting in its handler for the session's
// verdict: nil acks it, an error nacks it.
type delivery struct {
	ev  pubsub.Event
	res chan error
}

var errLeaseLost = errors.New("signals: lease lost before the signal was used")

func newSession(rt *Runtime, thread string) *session {
	return &session{
		rt: rt, thread: thread, startedAt: time.Now(),
		ready: make(chan struct{}), deliveries: make(chan delivery),
		quit: make(chan struct{}), ended: make(chan struct{}),
		seen: make(map[string]bool), waiters: make(map[string][]chan struct{}),
	}
}

func (s *session) current() (runID, owner string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.runID, s.held.Owner()
}

// handle is the inbox handler: it hands the event to the session and returns
// the session's verdict once the run that took it is finished with it.
//
// On a backend that tells when it has written a delivery's ack
// (internal/ackhook), it counts the delivery in s.unacked until then, so
// that a wake notice of the signal handled in this process is acked only
// after the inbox entry (awaitAck): a process killed between the two then
// leaves the notice, which makes a live runtime look at the inbox
// (noteDone), rather than an inbox entry recorded done, pending on a dead
// consumer and named by nothing, which kept the inbox for ever (review
// h65: TestReviewH65OwnNoticeAckBeforeInboxAck).
func (s *session) handle(ctx context.Context, ev pubsub.Event) (err error) {
	if hook := ackhook.From(ctx); hook != nil {
		s.ackStarted(ev.ID)
		defer func() {
			if err == nil {
				hook.Add(func() { s.ackFinished(ev.ID) })
			} else {
				s.ackFinished(ev.ID) // no ack of ours to wait for
			}
		}()
	}
	d := delivery{ev: ev, res: make(chan error, 1)}
	select {
	case s.deliveries <- d:
	case <-s.quit:
		return errRetry
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-d.res:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ackStarted counts an inbox delivery of signal id whose ack is to come.
func (s *session) ackStarted(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.unacked == nil {
		s.unacked = make(map[string]int)
	}
	s.unacked[id]++
}

// ackFinished ends what ackStarted counted: the ack was written or given
// up on, or none is coming; the last one wakes the waiters.
func (s *session) ackFinished(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.unacked[id]--; s.unacked[id] > 0 {
		return
	}
	delete(s.unacked, id)
	for _, ch := range s.ackWaiters[id] {
		close(ch)
	}
	delete(s.ackWaiters, id)
}

// awaitAck waits until no inbox delivery of signal id to this session has
// an ack unfinished (ackStarted), the session ended, or timeout or closing
// fire. It reports false when timeout or closing fired first: the inbox
// ack may still be on its way, and the caller must not ack the wake notice
// (review h68: on a Cluster the two acks go to different masters, and a
// slow inbox master let the notice's ack be written first:
// TestReviewH68NoticeAckWaitsForSlowInboxAck). A waiter that gives up
// removes its channel.
func (s *session) awaitAck(id string, timeout <-chan time.Time, closing <-chan struct{}) bool {
	s.mu.Lock()
	if s.unacked[id] == 0 {
		s.mu.Unlock()
		return true
	}
	ch := make(chan struct{})
	if s.ackWaiters == nil {
		s.ackWaiters = make(map[string][]chan struct{})
	}
	s.ackWaiters[id] = append(s.ackWaiters[id], ch)
	s.mu.Unlock()
	select {
	case <-ch:
		return true
	case <-s.ended:
		return true
	case <-timeout:
	case <-closing:
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ws := s.ackWaiters[id]
	for i, w := range ws {
		if w == ch {
			ws = append(ws[:i], ws[i+1:]...)
			break
		}
	}
	if len(ws) == 0 {
		delete(s.ackWaiters, id)
	} else {
		s.ackWaiters[id] = ws
	}
	select {
	case <-ch:
		return true // finished as it gave up
	default:
		return false
	}
}

// kick tells the tenure's inbox subscription (pubsub.ReadOnDemand) to read
// what was published before the call: every path that learns of a signal
// for a thread this process holds (a local Send, a wake notice seen by the
// fan-out watch or taken by a notice handler) calls it after the signal is
// in the inbox.
func (s *session) kick() {
	s.mu.Lock()
	sub := s.inbox
	if sub == nil {
		s.kicked = true
	}
	s.mu.Unlock()
	if k, ok := sub.(pubsub.Kicker); ok {
		k.Kick()
	}
}

// kickFor kicks the tenure for a signal, named by its wake notice's ID
// (noticeID), which is in the inbox already (the caller stored it, or saw
// the wake notice, stored after it), heard of by source by, unless another
// source kicked for that notice less than kickCover ago. The owner hears of
// a signal up to three times (a local Send, its fan-out watch of the wake
// notice, the notice's handler when it lands here); only the first reads
// the inbox. A kick asks for a read of everything stored before it
// (pubsub.Kicker), retried by the subscription until it ran, so the later
// ones would read nothing (TestInboxReadOncePerSignal).
//
// The marks are per notice, not per signal ID: a Send retried with the same
// ID stores another copy with a notice of its own, read (and acked unrun, a
// duplicate) like any other (TestDuplicateSendReadByItsTenure). A publish
// that go-redis sent twice stores the signal and its notice twice under one
// notice ID: the source that hears of the same notice again (the fan-out
// watch sees every stored notice) kicks again, so that the second copy is
// read too (TestRetriedPublishCopyRead). A mark older than kickCover no
// longer counts: a notice that comes back after a nack kicks again.
func (s *session) kickFor(noticeID string, by kickSource) {
	id := noticeID
	if id == "" {
		s.kick() // nothing to tell it by
		return
	}
	now := time.Now()
	s.mu.Lock()
	// A mark made by this same source does not stand for this news: the
	// same notice ID seen again by one source is another stored copy (a
	// publish go-redis retried stores the signal and its notice again).
	m, ok := s.kickedAt[id]
	if ok && now.Sub(m.at) >= kickCover {
		m, ok = kickMark{}, false
	}
	// A source's first news of the copy is covered by another's kick; its
	// second news is another stored copy.
	skip := ok && m.by&by == 0
	if skip {
		m.by |= by
		s.kickedAt[id] = m
	} else {
		if len(s.kickedAt) >= kickedMax {
			for k, t := range s.kickedAt {
				if now.Sub(t.at) >= kickCover {
					delete(s.kickedAt, k)
				}
			}
			if len(s.kickedAt) >= kickedMax {
				clear(s.kickedAt) // only costs reads that find nothing
			}
		}
		if s.kickedAt == nil {
			s.kickedAt = make(map[string]kickMark)
		}
		s.kickedAt[id] = kickMark{at: now, by: by}
	}
	s.mu.Unlock()
	if !skip {
		s.kick()
	}
}

// kickSource is who heard of a signal (kickFor), a bit each.
type kickSource uint8

const (
	bySend   kickSource = 1 << iota // a local Send, once its publish returned
	byWatch                         // the fan-out watch of the work topic
	byNotice                        // a notice handler of this process
)

// kickMark is a tenure's record of a notice it was kicked for: when, and
// the sources that heard of it since.
type kickMark struct {
	at time.Time
	by kickSource
}

const (
	// kickCover is how long a kick for a signal stands for later news of
	// it (kickFor).
	kickCover = 250 * time.Millisecond
	// kickedMax bounds a tenure's kick marks (kickFor).
	kickedMax = 1024
)

type awaitResult int

const (
	awaitDone awaitResult = iota
	awaitEnded
	awaitTimeout
)

// await waits until signal id was run (or skipped) by this session, the
// session ended, or timeout/closing fire.
func (s *session) await(id string, timeout <-chan time.Time, closing <-chan struct{}) awaitResult {
	select {
	case <-s.ready:
	case <-timeout:
		return awaitTimeout
	}
	s.mu.Lock()
	if s.ranHere(id) {
		s.mu.Unlock()
		return awaitDone
	}
	ch := make(chan struct{})
	s.waiters[id] = append(s.waiters[id], ch)
	s.mu.Unlock()
	select {
	case <-ch:
		return awaitDone
	case <-s.ended:
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.ranHere(id) {
			return awaitDone
		}
		return awaitEnded
	case <-timeout:
		return awaitTimeout
	case <-closing:
		return awaitTimeout
	}
}

func (s *session) markSeen(ids []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		if !s.seen[id] {
			s.seen[id] = true
			s.seenOrder = append(s.seenOrder, id)
			if len(s.seen) > DedupeEntries {
				delete(s.seen, s.seenOrder[s.seenHead])
				s.seenOrder[s.seenHead] = ""
				s.seenHead++
				if s.seenHead >= DedupeEntries {
					s.seenOrder = append([]string(nil), s.seenOrder[s.seenHead:]...)
					s.seenHead = 0
				}
			}
		}
		for _, ch := range s.waiters[id] {
			close(ch)
		}
		delete(s.waiters, id)
	}
}

// ranHere reports whether this tenure, or this process, ran id (or skipped
// it as a duplicate), or the done record last read or written holds it.
// Call with s.mu held.
func (s *session) ranHere(id string) bool {
	return s.seen[id] || recordHas(s.record, id) || s.rt.done.has(s.thread, id)
}

// skip acks d without running it when its ID was run already.
func (s *session) skip(d delivery) bool {
	if s.dropped(d) {
		return true
	}
	id := d.ev.ID
	s.mu.Lock()
	dup := s.ranHere(id)
	s.mu.Unlock()
	if !dup {
		return false
	}
	s.markSeen([]string{id})
	d.res <- nil
	runID, owner := s.current()
	s.rt.emit(Event{Kind: SignalSkipped, Thread: s.thread, RunID: runID, Owner: owner, Signals: []Signal{toSignal(d.ev)}})
	return true
}

// complete records ds as run (done record, local cache, waiters) and acks
// them, while held is live: it checks the lease (its loss deadline
// included) right before writing the done record, bounds that write by the
// loss deadline, and checks again right before acking. When the lease is lost it
// nacks them instead and reports false, so that the next owner gets them
// again (as redeliveries, first) rather than having a stale owner's run count
// as done while its fenced effects may have been refused.
func (s *session) complete(held *lease.Held, ds []delivery) bool {
	if len(ds) == 0 {
		return held.Err() == nil
	}
	if held.Err() != nil {
		abandon(ds, errLeaseLost)
		return false
	}
	ids := make([]string, len(ds))
	var marks []string // drop marks, recorded apart too (recordAdd)
	for i, d := range ds {
		ids[i] = d.ev.ID
		if d.ev.Type == dropMarkType {
			marks = append(marks, d.ev.ID)
		}
	}
	if s.rt.leases {
		s.mu.Lock()
		cached := s.record
		s.mu.Unlock()
		// Only while the lease is held: the write ends at the Held's loss
		// deadline (a client that honours ctx deadlines gives up then), or
		// when Close gives up on the teardown (tearCtx: the record is then
		// left as it was, as when the write fails).
		ctx, cancel := context.WithDeadline(held.Context(), held.Deadline())
		stop := context.AfterFunc(s.rt.tearCtx, cancel)
		rec, err := writeRecord(ctx, s.rt.lp, s.thread, cached, ids, marks, s.rt.cfg.dedup)
		stop()
		cancel()
		if err != nil {
			s.rt.log.Warn("signals: writing the done record failed", "thread", s.thread, "err", err)
		}
		s.mu.Lock()
		s.record = rec
		s.mu.Unlock()
	}
	if held.Err() != nil {
		// Lost while the record was written: a stale owner never acks.
		abandon(ds, errLeaseLost)
		return false
	}
	for _, id := range ids {
		s.rt.done.add(s.thread, id)
	}
	s.markSeen(ids)
	for _, d := range ds {
		d.res <- nil
	}
	return true
}

func abandon(ds []delivery, err error) {
	for _, d := range ds {
		d.res <- err
	}
}

func toSignal(ev pubsub.Event) Signal {
	return Signal{ID: ev.ID, Type: ev.Type, Data: ev.Data, Metadata: ev.Metadata, Redelivered: ev.DeliveryAttempt > 1}
}

// loop runs the session: subscribe to the inbox, run each delivery (handing
// the lease to a new owner with TransferLease between runs), and end when no
// delivery came for the linger time, the runtime closes or the lease is lost.
func (s *session) loop() {
	rt := s.rt
	defer rt.wg.Done()
	s.mu.Lock()
	held := s.held
	s.mu.Unlock()
	lost := false
	released := false      // the tenure ended releasing the lease
	handOffLost := false   // a hand-off of this tenure had an unknown outcome
	releaseFailed := false // the release failed: the lease may still be this tenure's
	subscribed := false    // a tenure whose inbox subscription failed read nothing: it settles no notice
	// emitLost emits LeaseLost once, as soon as the tenure ended with its
	// lease lost: before its inbox subscription's clean-up, which waits up
	// to 10s on a server that does not answer (review h69:
	// TestReviewH69LeaseLostEventTiming saw the event 13.3s after a peer's
	// run of the thread started).
	lostEmitted := false
	emitLost := func() {
		if lostEmitted {
			return
		}
		lostEmitted = true
		// The tenure starts no run now: end its cancel control first, so
		// that a Cancel during the clean-up is told it is gone at once,
		// and no Cancelled of a run about to start (a hand-off that
		// failed) follows the LeaseLost (TestReviewH73NoEventAfterLeaseLost).
		s.ctlEnded()
		runID, owner := s.current()
		rt.emit(Event{Kind: LeaseLost, Thread: s.thread, RunID: runID, Owner: owner, Token: held.Token(), Err: context.Cause(held.Context())})
	}
	defer func() {
		// The session stays in rt.sessions until the lease is released: a
		// local Send or notice handler that finds it with quit closed waits
		// for ended and then tries the lease itself, rather than taking the
		// lease as held by a tenure that reads nothing more (the window
		// between the end of the inbox subscription and the release).
		s.quitOnce.Do(func() { close(s.quit) })
		s.ctlEnded()
		runID, owner := s.current()
		if lost {
			cause := context.Cause(held.Context())
			emitLost()
			if errors.Is(cause, lease.ErrRevoked) {
				// A revoked lease stays with this owner until it stops:
				// it has (the runs are over), so free the thread now
				// rather than at its expiry.
				ctx, cancel := rt.teardownCtx()
				if err := held.Release(ctx); err != nil {
					rt.log.Warn("signals: release of a revoked lease failed", "thread", s.thread, "owner", owner, "err", err)
				}
				cancel()
			} else if errors.Is(cause, lease.ErrTransferUnknown) {
				// A hand-off of unknown outcome (lease.Held.Transfer
				// fails closed): unless the transfer ran, the lease is
				// still this tenure's, which nobody renews, and the
				// takeover below would find it held by an owner it does
				// not remember and leave the thread for its TTL
				// (TestReviewH73HandOffTransferLostIsTakenOver/NotRun).
				// Release it (with its token, on a lease.TokenReleaser:
				// a lease the transfer gave nextOwner is left alone, and
				// a transfer that runs after the release is refused). If
				// the release fails the lease is remembered as after a
				// failed release, so that the takeover releases it.
				ctx, cancel := rt.teardownCtx()
				if err := held.Release(ctx); err != nil && !errors.Is(err, lease.ErrNotHeld) {
					rt.log.Warn("signals: release after a hand-off of unknown outcome failed", "thread", s.thread, "owner", owner, "err", err)
					rt.noteReleaseFailed(s.thread, runID, owner, time.Now())
				}
				cancel()
			}
		} else {
			if h := rt.cfg.hooks.beforeRelease; h != nil {
				h(s.thread)
			}
			ctx, cancel := rt.teardownCtx()
			if err := held.Release(ctx); err != nil {
				rt.log.Warn("signals: release failed", "thread", s.thread, "owner", owner, "err", err)
				if !errors.Is(err, lease.ErrNotHeld) {
					// The lease may still be this tenure's, whose runs
					// are over: remember it (givenup.go, noteReleaseFailed),
					// so that this process releases it when it finds it
					// and takes the thread for a new run (its own Send
					// would otherwise be Forwarded to it, and every signal
					// would wait for the TTL: TestReleaseFailedIsTakenOver).
					releaseFailed = true
					rt.noteReleaseFailed(s.thread, runID, owner, time.Now())
				}
			} else {
				released = true
			}
			cancel()
			rt.emit(Event{Kind: Released, Thread: s.thread, RunID: runID, Owner: owner, Token: held.Token()})
		}
		s.mu.Lock()
		drained := s.drained
		s.mu.Unlock()
		rt.noteTenureEnd(s.thread, s.startedAt, !lost && subscribed, drained)
		rt.removeSession(s)
		close(s.ended)
		if lost || handOffLost && !released {
			// A hand-off of this tenure whose reply was lost may have
			// leased the thread to a run that never starts: take it over
			// (givenup.go; nothing when none was lost). Such a hand-off
			// ends the tenure with its lease lost (lease.Held.Transfer
			// fails closed), released above: the try finds the thread
			// free when the transfer did not run. (A release that
			// succeeded tries the thread: afterRelease.)
			rt.adoptLate(s.thread, "")
		} else if releaseFailed {
			// The lease may still be this tenure's: release it and
			// start a new run (adoptAfterFailedRelease).
			rt.adoptAfterFailedRelease(s.thread, owner)
		}
		if released && subscribed {
			// (Not after a failed inbox subscription: the next tenure
			// would most likely fail the same way, at once, for good.)
			rt.afterRelease(s.thread)
		}
	}()

	// The tenure holds the thread's fenced lease, so it is the inbox's sole
	// legitimate reader: it claims whatever a predecessor (dead, or stale
	// and fenced off) had taken and not finished, and gets those first, in
	// order, marked as redeliveries, before any newer signal.
	//
	// It reads on demand: it holds no connection waiting for signals
	// (pubsub.ReadOnDemand), and reads when told to by kick.
	//
	// The setup is not bounded by the TTL, but by Close giving up
	// (hardCtx): Close waits for this tenure, and a setup in flight to a
	// server that stopped answering would hold it for go-redis's timeouts
	// (TestCloseOnStalledServerUnderAcquireLoad).
	opts := []pubsub.SubscribeOption{pubsub.Group(InboxGroup), pubsub.StartFrom(pubsub.Earliest), pubsub.ClaimPending(),
		pubsub.AckDeadline(inboxAckDeadline(rt.cfg.ttl)), pubsub.ReadOnDemand()}
	if groupPublishes(rt.ps) {
		opts = append(opts, pubsub.ExpireWhenDrained(inboxExpiry(rt.cfg)))
	}
	sub, err := rt.ps.Subscribe(rt.hardCtx, InboxTopic(s.thread), s.handle, opts...)
	if err != nil {
		rt.log.Warn("signals: subscribe to inbox failed", "thread", s.thread, "err", err)
		return
	}
	subscribed = true
	s.mu.Lock()
	s.inbox = sub
	kicked := s.kicked
	s.mu.Unlock()
	if k, ok := sub.(pubsub.Kicker); ok && kicked {
		k.Kick()
	}
	defer func() {
		// Stop deliveries before the lease is released (deferred above, runs
		// after this): no handler holds an event once Unsubscribe returned.
		s.quitOnce.Do(func() { close(s.quit) })
		if lost {
			emitLost()
		}
		// Not bounded by the TTL: a tenure that ends during a stall waits
		// for its consumer to be gone before the inbox is looked at, or
		// the deletion finds the inbox in use and nobody deletes it later
		// (TestFootprintAfterRedisStall). Close giving up ends the wait.
		_ = sub.Unsubscribe(rt.tearCtx)
		if lost || !s.dropDrainedInbox() {
			// Later, once the server answers: no notice may ever bring
			// a tenure back to an idle thread's inbox.
			rt.tidyLater(s.thread)
		}
	}()
	if rt.leases {
		ctx, cancel := rt.teardownCtx()
		rec, err := rt.lp.GetLeaseOwner(ctx, recordKey(s.thread))
		cancel()
		if err == nil {
			s.mu.Lock()
			s.record = rec
			s.mu.Unlock()
		}
	}

	used := false
	firstWait := firstWait(rt.cfg)
	timer := time.NewTimer(firstWait)
	defer timer.Stop()
	sendWait := false // the timer fired while this tenure's Send was publishing
	for {
		select {
		case d := <-s.deliveries:
			if rt.isClosed() {
				// Close starts no run: the signal stays in the inbox for
				// whoever takes the thread next.
				d.res <- errRetry
				return
			}
			if s.skip(d) {
				continue
			}
			s.ctlStarting()
			if used {
				if h := rt.cfg.hooks.beforeHandOff; h != nil {
					h(s.thread)
				}
				nextRun, nextOwner := rt.newRun()
				s.mu.Lock()
				prevRun := s.runID
				s.mu.Unlock()
				// Bounded as the teardown is: a transfer in flight to a
				// server that stopped answering ends when Close gives up
				// (TestCloseOnStalledServerHandOff).
				tctx, cancel := rt.teardownCtx()
				nh, err := held.Transfer(tctx, nextOwner)
				cancel()
				if err != nil {
					if errors.Is(err, lease.ErrTransferUnknown) {
						// Its reply was lost: the transfer may have run,
						// or may still, leasing the thread to nextRun,
						// which never starts here; the Held has ended
						// (lease.Held.Transfer fails closed), so this
						// tenure ends with the lease lost. Remembered so
						// that the thread is taken over for nextRun
						// (givenup.go).
						rt.noteGivenUp(s.thread, nextRun, nextOwner, time.Now())
						handOffLost = true
					}
					d.res <- fmt.Errorf("signals: hand-off failed: %w", err)
					if held.Err() != nil {
						lost = true
						return
					}
					continue
				}
				rt.emit(Event{Kind: HandedOff, Thread: s.thread, RunID: nextRun, Owner: nextOwner, Token: nh.Token(),
					PrevRunID: prevRun, PrevOwner: held.Owner(), PrevToken: held.Token()})
				s.mu.Lock()
				held, s.held, s.runID = nh, nh, nextRun
				s.mu.Unlock()
			}
			used = true
			if rt.isClosed() {
				// Close began during the hand-off: it starts no run. The
				// signal stays in the inbox; the lease (handed to the run
				// that does not start) is released as the tenure ends.
				d.res <- errRetry
				return
			}
			if !s.run(held, d) {
				lost = held.Err() != nil
				return
			}
			sendWait = false
			timer.Reset(rt.cfg.linger)
		case <-held.Done():
			lost = true
			return
		case <-timer.C:
			if s.sending.Load() > 0 {
				// The Send that started this tenure is still storing
				// its signal: wait for it (Send kicks once it is done).
				sendWait = true
				timer.Reset(rt.cfg.linger)
				continue
			}
			if sendWait {
				// That Send is done and has kicked: give the read it
				// started the first wait, not just the linger time.
				sendWait = false
				timer.Reset(firstWait)
				continue
			}
			if s.dropPending() {
				// A Cancel with DropQueued reached this tenure and its
				// mark is not read yet: the signals before it are to be
				// dropped here. A next tenure knows nothing of the drop
				// and would run them (review h71, a read slower than the
				// linger time: TestReviewH71DropQueuedSurvivesTenureEnd).
				// The mark is in the inbox (stored before the request):
				// read on until it comes, while the inbox still holds
				// something for this tenure (a mark gone otherwise, its
				// inbox deleted by hand, must not hold the thread).
				if s.inboxHoldsMore() {
					s.kick()
					timer.Reset(firstWait)
					continue
				}
			}
			if h := rt.cfg.hooks.lingerEnd; h != nil {
				h(s.thread)
			}
			return
		case <-rt.closing:
			return
		}
	}
}

// run gives d to a new run of the agent and reports whether the session can
// go on (false when the lease was lost or the runtime stopped waiting).
func (s *session) run(held *lease.Held, d delivery) bool {
	rt := s.rt
	if held.Err() != nil {
		// Past its loss deadline already (say the process was paused and
		// the Held's timer has not fired yet): start nothing; the next
		// owner gets the signal.
		abandon([]delivery{d}, errLeaseLost)
		return false
	}
	startedAt, ok := rt.runStarted()
	if !ok {
		// Close began: it starts no run (its teardown may already be
		// over). The signal stays in the inbox for whoever takes the
		// thread next.
		d.res <- errRetry
		return false
	}
	ctx, cancel := context.WithCancelCause(held.Context())
	stop := context.AfterFunc(rt.hardCtx, func() { cancel(ErrClosed) })
	defer func() {
		stop()
		cancel(nil)
	}()
	s.mu.Lock()
	runID := s.runID
	s.mu.Unlock()
	sig := toSignal(d.ev)
	r := &Run{
		ID: runID, Thread: s.thread, Token: held.Token(), Owner: held.Owner(),
		Signals: []Signal{sig}, Redelivered: []bool{sig.Redelivered},
		s: s, held: held, ctx: ctx, cur: []delivery{d},
	}
	s.ctlRunStarted(cancel, runID, r.Token)
	rt.emit(Event{Kind: RunStarted, Time: startedAt, Thread: s.thread, RunID: runID, Owner: r.Owner, Token: r.Token, Signals: r.Signals})
	err := callAgent(ctx, rt.agent, r)
	rt.runEnded()
	s.ctlRunEnded()
	if ctx.Err() != nil && !s.cancelledOnly(ctx, held) {
		// Lost or stopped: the signals it holds were not finished; leave them
		// for the next owner, who gets them marked as redelivered.
		abandon(r.cur, errLeaseLost)
		r.cur = nil
		rt.emit(Event{Kind: RunEnded, Thread: s.thread, RunID: runID, Owner: r.Owner, Token: r.Token, Err: context.Cause(ctx)})
		return false
	}
	if !s.complete(held, r.cur) {
		r.cur = nil
		rt.emit(Event{Kind: RunEnded, Thread: s.thread, RunID: runID, Owner: r.Owner, Token: r.Token, Err: context.Cause(held.Context())})
		return false
	}
	r.cur = nil
	if err != nil {
		rt.log.Warn("signals: agent returned an error", "thread", s.thread, "run", runID, "err", err)
	}
	rt.emit(Event{Kind: RunEnded, Thread: s.thread, RunID: runID, Owner: r.Owner, Token: r.Token, Err: err})
	return true
}

// errAgentExited is the error of a run whose agent ended its goroutine
// instead of returning.
var errAgentExited = errors.New("signals: agent ended its goroutine (runtime.Goexit, as testing's FailNow does) instead of returning")

// callAgent runs the agent for r and returns its error. A panic is
// recovered as an error. The agent runs on a goroutine of its own, so that
// one that ends its goroutine (runtime.Goexit) instead of returning ends
// only that one: the run ends with errAgentExited, as it would with a
// panic, where the session's goroutine would otherwise die holding the
// thread (TestAgentGoexitEndsItsRun).
func callAgent(ctx context.Context, agent Agent, r *Run) error {
	done := make(chan error, 1)
	go func() {
		returned := false
		defer func() {
			if p := recover(); p != nil {
				done <- fmt.Errorf("signals: agent panicked: %v", p)
			} else if !returned {
				done <- errAgentExited
			}
		}()
		err := agent(ctx, r)
		returned = true
		done <- err
	}()
	return <-done
}

// inboxAckDeadline is the ack deadline of inbox subscriptions: a quarter of
// the lease TTL. A new tenure claims its predecessors' pending entries as it
// subscribes (ClaimPending); the deadline only covers an entry a stale owner
// read after that, before it noticed its lease was gone.
func inboxAckDeadline(ttl time.Duration) time.Duration {
	return max(ttl/4, 10*time.Millisecond)
}

// inboxExpiry is how long after a tenure's ack left its inbox drained the
// backend deletes the inbox unless a signal comes first
// (pubsub.ExpireWhenDrained, on redisstreams; each PublishFor of a signal
// cancels it): what a process killed while its tenures linger leaves
// behind. It is three first waits (the longest a tenure lingers after its
// last ack is the linger time, plus the first wait when a Send that started
// it was still storing its signal) and two lease TTLs: a live tenure has
// ended, and deleted the inbox itself, well before. It is at least
// minInboxExpiry.
func inboxExpiry(c config) time.Duration {
	floor := minInboxExpiry
	if c.hooks.expiryFloor != nil {
		floor = *c.hooks.expiryFloor
	}
	return max(3*firstWait(c)+2*c.ttl, floor)
}

// minInboxExpiry is the shortest inboxExpiry, as long as a dead member's
// read guard stays (redisstreams). A signal stored with a plain Publish (a
// sender whose pubsub, a wrapper, has neither pubsub.BatchPublisher nor
// pubsub.GroupPublisher; a process of a version before the expiry) does not
// take the expiry back, and a tenure's first read of it does: such a signal
// is lost only when nothing reads it for that long after its owner was
// killed (TestKilledOwnerMixedSenderKeepsSignal: a 16s outage, kept).
const minInboxExpiry = 10 * time.Minute

// groupPublishes reports whether publishSignal stores a signal on ps with
// its group (pubsub.BatchPublisher's Publication.Group or
// pubsub.GroupPublisher), which removes the inbox's expiry
// (pubsub.ExpireWhenDrained). Through a wrapper without either, a signal is
// stored with a plain Publish, which does not: an inbox that expired with
// it unread (its owner killed, its sender gone) would lose an accepted
// signal (TestKilledOwnerWrappedKeepsSignal), so the inbox is not set to
// expire at all.
func groupPublishes(ps pubsub.PubSub) bool {
	_, bp := ps.(pubsub.BatchPublisher)
	_, gp := ps.(pubsub.GroupPublisher)
	return bp || gp
}

// firstWait is how long a new tenure waits for its first delivery: it also
// covers setting up the subscription and claiming what a predecessor left
// pending; later waits are the linger time.
func firstWait(c config) time.Duration {
	return max(c.linger, inboxAckDeadline(c.ttl)+100*time.Millisecond)
}

// dropDrainedInbox deletes the thread's inbox when the pubsub can
// (pubsub.DrainedDeleter) and the tenure leaves it drained: every signal
// taken and acked, none waiting. The lease is still held, so no other
// tenure reads the inbox meanwhile; a signal sent after the deletion starts
// a new inbox, which the next tenure reads from its start. It reports false
// when the deletion failed (logged): the runtime tries again later
// (tidyLater).
func (s *session) dropDrainedInbox() bool {
	dd := s.rt.dd
	if dd == nil {
		return true
	}
	ctx, cancel := s.rt.teardownCtx()
	defer cancel()
	// (Not Flush: it waits for every local delivery, notice handlers
	// waiting on this tenure included. An ack not yet written keeps the
	// inbox, which is safe; redisstreams writes a subscription's acks
	// before its Unsubscribe returns.)
	gone, err := dd.DeleteTopicIfDrained(ctx, InboxTopic(s.thread), InboxGroup)
	if err != nil {
		s.rt.log.Warn("signals: deleting the inbox if drained failed; trying again later", "thread", s.thread, "err", err)
		return false
	}
	if !gone && s.rt.br != nil {
		// Kept for another reason (another group on it, entries of it
		// deleted by hand): drained all the same when the inbox group has
		// nothing left, which settles stale notices after this tenure
		// rather than after ten (settledByTenures).
		if bl, err := s.rt.br.GroupBacklog(ctx, InboxTopic(s.thread), InboxGroup); err == nil && bl.Lag == 0 && bl.Pending == 0 {
			gone = true
		}
	}
	s.mu.Lock()
	s.drained = gone
	s.mu.Unlock()
	return true
}

// inboxHoldsMore reports whether the inbox group may still have an entry
// to give this tenure (pubsub.BacklogReader: one not delivered, or
// delivered and not acked; true when the backlog cannot be told or read),
// false without a BacklogReader.
func (s *session) inboxHoldsMore() bool {
	if s.rt.br == nil {
		return false
	}
	ctx, cancel := s.rt.teardownCtx()
	defer cancel()
	bl, err := s.rt.br.GroupBacklog(ctx, InboxTopic(s.thread), InboxGroup)
	return err != nil || bl.Lag != 0 || bl.Pending != 0
}

// ranHereNow reports, without waiting, whether this tenure (or this
// process, or the done record the tenure last wrote) ran id.
func (s *session) ranHereNow(id string) bool {
	select {
	case <-s.ready:
	default:
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ranHere(id)
}
