package signals

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/pubsub"
)

// Control of threads from any process: cancel a thread's running run, read
// a thread's status. See [Runtime.Cancel], [Runtime.Status] and
// [Controller].

// ControlTopic is the topic of control requests and their answers. Every
// Runtime and Controller subscribes to it (fan-out, from the latest event).
const ControlTopic = "signals.control"

// DefaultControlTimeout is how long Cancel waits for the owner's answer when
// its ctx has no deadline.
const DefaultControlTimeout = 5 * time.Second

// Event types and metadata keys of control events.
const (
	cancelType      = "signals.cancel"
	cancelReplyType = "signals.cancel.reply"
	// dropMarkType is the inbox event Cancel with DropQueued publishes before
	// its request: the owner drops the inbox entries before it.
	dropMarkType = "signals.cancel.mark"

	metaTo      = "leasebus.control.to"   // the process (request) or controller (answer) addressed
	metaFrom    = "leasebus.control.from" // the controller asking
	metaReq     = "leasebus.control.req"  // request id
	metaReason  = "leasebus.control.reason"
	metaDrop    = "leasebus.control.drop" // id of the drop mark
	metaOutcome = "leasebus.control.outcome"
	metaRun     = "leasebus.control.run"
	metaToken   = "leasebus.control.token"
)

var (
	// ErrCancelled is matched (errors.Is) by the cause of a run's context
	// that Cancel cancelled: a *CancelError.
	ErrCancelled = errors.New("signals: run cancelled")

	// ErrUnreachable is wrapped by the error of a Cancel whose owner did not
	// answer in time: the process holding the thread is dead, paused,
	// partitioned or overloaded, or the lease provider that names it did
	// not answer. The cancel may or may not have reached it.
	ErrUnreachable = errors.New("signals: thread owner unreachable")
)

// CancelError is the context.Cause of a run cancelled by Cancel. It matches
// ErrCancelled with errors.Is and carries the reason given to Cancel.
type CancelError struct {
	Thread string
	Reason string
}

// Error returns a message such as
// `signals: run of thread "t-1" cancelled: user pressed stop`.
func (e *CancelError) Error() string {
	return fmt.Sprintf("signals: run of thread %q cancelled: %s", e.Thread, e.Reason)
}

// Is reports whether target is ErrCancelled.
func (e *CancelError) Is(target error) bool { return target == ErrCancelled }

// CancelResult is the outcome of a Cancel that reached the thread's owner.
type CancelResult struct {
	Thread string
	// Cancelled reports that a run's context was cancelled. False means no
	// run was active: nobody held the thread, or its holder was between
	// runs (a no-op).
	Cancelled bool
	// Owner is the lease owner of the thread when Cancel read it ("" when no
	// process held it).
	Owner string
	// Process is the process that answered ("" when no process held the
	// thread).
	Process string
	// RunID and Token name the run cancelled.
	RunID string
	Token uint64
}

// CancelOption configures one Cancel call.
type CancelOption func(*cancelConfig)

type cancelConfig struct{ drop bool }

// DropQueued makes Cancel also drop the signals queued for the thread when
// the cancel was sent: the owner acks them without running them (they count
// as done, so a duplicate Send of one is not run either). Signals sent after
// Cancel returned run as usual. The drop is applied by the owner that Cancel
// reached: if that owner dies or loses the thread before it got to the end
// of the queue, the next owner runs the rest. A request that reaches the
// owner more than half the owner's dedupe window after Cancel made its
// mark (by the two processes' clocks) drops nothing: by then Cancel has
// long stopped waiting, and the done record that tells whether the mark
// was read may have expired.
func DropQueued() CancelOption { return func(c *cancelConfig) { c.drop = true } }

// ThreadStatus is a thread's state as [Runtime.Status] reads it from the
// shared state (the lease provider and the pubsub), so any process gives the
// same answer.
type ThreadStatus struct {
	Thread string
	// Owner is the lease owner, "<process>/<run id>"; "" when no process
	// holds the thread.
	Owner string
	// Process and RunID are the two parts of Owner.
	Process string
	RunID   string
	// Token is the fencing token of the holding run (0 when the lease
	// provider cannot tell it: it has no lease.Inspector).
	Token uint64
	// TTL is the time left on the thread's lease (0 when unknown).
	TTL time.Duration
	// Queued counts the signals accepted for the thread that no run has
	// taken yet; -1 when the pubsub cannot tell (it has no
	// pubsub.BacklogReader). It counts the thread's inbox entries, so it
	// also counts the drop mark of each Cancel with DropQueued that no run
	// or recovery has taken yet (one entry per such Cancel): a thread with
	// no signal shows 1 after one such Cancel whose owner is gone, until
	// its lease ends and a runtime drains the inbox
	// (TestThreadsCancelDropMarkCountsAsQueued in cmd/leasebus).
	Queued int64
	// InFlight counts the signals a run has taken and not finished
	// (normally the one running, if any); -1 when unknown.
	InFlight int64
	// LastSignal is when the newest signal of the thread, or the newest
	// drop mark (see Queued), was stored (zero when none is retained, or
	// unknown).
	LastSignal time.Time
}

// IsInternalLeaseKey reports whether a lease key is one the runtime keeps
// for its own records (the per-thread done records, "signals.done.<thread>")
// rather than a lease of a thread or of the application. Operator listings
// use it to leave those out.
func IsInternalLeaseKey(key string) bool { return strings.HasPrefix(key, recordKey("")) }

// Controller sends control requests and reads thread status from any
// process, without running threads: what an operator command or a web
// handler that is not a Runtime uses. A Runtime has one built in
// ([Runtime.Cancel], [Runtime.Status]). It is safe for concurrent use.
type Controller struct {
	ps     pubsub.PubSub
	lp     lease.Provider
	leases bool
	id     string
	rt     *Runtime // the Runtime this Controller serves; nil when standalone

	// subMu guards sub and subbing: a standalone Controller subscribes at
	// its first request to another process (subscribed), a Runtime's at its
	// start. subbing is closed when the Subscribe in flight is over.
	subMu   sync.Mutex
	sub     pubsub.Subscription
	subbing chan struct{}

	mu      sync.Mutex
	closed  bool
	closedC chan struct{} // closed by Close: wakes the Cancels waiting for an answer
	waiting map[string]chan cancelAnswer
	replies sync.WaitGroup // answers being published
}

// NewController returns a Controller on ps. It finds the lease capability
// as New does; without one, Cancel and Status see no owner. It talks to
// nobody yet: it subscribes to ControlTopic (for the owners' answers) at
// the first Cancel that asks another process, so a Controller that only
// reads status (Status, List) holds no subscription, and a server that
// stopped answering shows as the error of the call that needed it. ctx is
// not used (it bounded that subscription before it moved to Cancel); the
// only error is a nil ps (ErrInvalid). Close it when done.
func NewController(_ context.Context, ps pubsub.PubSub) (*Controller, error) {
	if ps == nil {
		return nil, fmt.Errorf("%w: pubsub is nil", ErrInvalid)
	}
	return newController(ps, "ctl-"+uuid.NewString(), nil), nil
}

func newController(ps pubsub.PubSub, id string, rt *Runtime) *Controller {
	lp, ok := lease.ProviderOf(ps)
	return &Controller{ps: ps, lp: lp, leases: ok, id: id, rt: rt, closedC: make(chan struct{}), waiting: make(map[string]chan cancelAnswer)}
}

// subscribed subscribes c to ControlTopic unless it is already: from the
// stream's end, before c publishes a request, so that the answer is read.
// One Subscribe is in flight at a time; a caller that finds one waits for it
// or for its own ctx (a Subscribe to a server that stopped answering lasts
// as long as its caller's ctx: TestConcurrentCancelsOnStalledServer), and
// tries itself when that one failed. After Close it returns ErrClosed; a
// Subscribe that Close overtook is undone here, by its caller, so that
// Close need not wait for it (TestCloseDuringStuckFirstCancel).
func (c *Controller) subscribed(ctx context.Context) error {
	for {
		c.subMu.Lock()
		switch {
		case c.sub != nil:
			c.subMu.Unlock()
			return nil
		case c.isClosed():
			c.subMu.Unlock()
			return ErrClosed
		case c.subbing != nil:
			wait := c.subbing
			c.subMu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return fmt.Errorf("signals: subscribe %s: %w", ControlTopic, ctx.Err())
			}
		}
		done := make(chan struct{})
		c.subbing = done
		c.subMu.Unlock()
		sub, err := c.ps.Subscribe(ctx, ControlTopic, c.onControl, pubsub.StartFrom(pubsub.Latest))
		c.subMu.Lock()
		c.subbing = nil
		closed := c.isClosed()
		if err == nil && !closed {
			c.sub = sub
		}
		close(done)
		c.subMu.Unlock()
		switch {
		case err != nil:
			return fmt.Errorf("signals: subscribe %s: %w", ControlTopic, err)
		case closed:
			_ = sub.Unsubscribe(context.WithoutCancel(ctx))
			return ErrClosed
		}
		return nil
	}
}

// Close stops the Controller: it unsubscribes, waits for the answers it is
// publishing, and makes later calls return ErrClosed. A Cancel waiting for
// an owner's answer returns at once with an error wrapping ErrClosed (its
// request went out: the owner may act on it), and one still subscribing
// undoes its subscription as it returns; Close waits for neither (on a
// server that stopped answering they last as long as their ctx). It does
// not close the pubsub. It is idempotent.
func (c *Controller) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	close(c.closedC)
	c.mu.Unlock()
	// A Subscribe in flight (subscribed) is not waited for: its Cancel
	// undoes it when it returns. None starts after this, since subscribed
	// checks closed under subMu.
	c.subMu.Lock()
	sub := c.sub
	c.subMu.Unlock()
	var err error
	if sub != nil {
		err = sub.Unsubscribe(context.Background())
		if errors.Is(err, pubsub.ErrClosed) {
			err = nil
		}
	}
	c.replies.Wait()
	return err
}

func (c *Controller) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// Cancel cancels the running run of thread, wherever it runs; see
// [Runtime.Cancel].
func (c *Controller) Cancel(ctx context.Context, thread, reason string, opts ...CancelOption) (CancelResult, error) {
	if thread == "" {
		return CancelResult{}, fmt.Errorf("%w: thread is empty", ErrInvalid)
	}
	if reason == "" {
		return CancelResult{}, fmt.Errorf("%w: cancel reason is empty (thread %q)", ErrInvalid, thread)
	}
	var cfg cancelConfig
	for i, o := range opts {
		if o == nil {
			return CancelResult{}, fmt.Errorf("%w: cancel option %d is nil", ErrInvalid, i)
		}
		o(&cfg)
	}
	if c.isClosed() {
		return CancelResult{}, ErrClosed
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultControlTimeout)
		defer cancel()
	}
	drop := ""
	if cfg.drop {
		// The mark goes into the inbox before the request, so every signal
		// queued when the cancel was sent lies before it. Its wake notice
		// has a runtime read it when no tenure holds the thread, so that
		// the inbox is drained and deleted rather than left behind.
		mark := pubsub.Event{ID: newMarkID(time.Now()), Type: dropMarkType}
		notice := pubsub.Event{Type: WakeType, Metadata: noticeMeta(thread, mark.ID)}
		if err := publishSignal(ctx, c.ps, thread, mark, notice); err != nil {
			return CancelResult{}, fmt.Errorf("signals: cancel thread %q: drop mark: %w", thread, err)
		}
		drop = mark.ID
	}
	cause := &CancelError{Thread: thread, Reason: reason}
	prev := ""
	for {
		owner, err := c.owner(ctx, thread)
		if err != nil {
			// The shared state did not answer: the owner cannot be asked.
			return CancelResult{}, fmt.Errorf("%w: cancel thread %q: read its owner: %w", ErrUnreachable, thread, err)
		}
		res := CancelResult{Thread: thread, Owner: owner}
		if owner == "" || owner == prev {
			// Nobody holds it, or its holder answered that it has no tenure
			// of the thread and the lease still names it (a tenure that
			// lost or was revoked the lease, which runs nothing).
			return res, nil
		}
		prev = owner
		res.Process = processOf(owner)
		var a cancelAnswer
		if c.rt != nil && res.Process == c.rt.cfg.process {
			a, err = c.rt.cancelLocalWait(ctx, thread, cause, drop)
		} else {
			a, err = c.ask(ctx, res.Process, thread, reason, drop)
		}
		if err != nil {
			return res, err
		}
		switch a.outcome {
		case outcomeCancelled:
			res.Cancelled, res.RunID, res.Token = true, a.runID, a.token
			return res, nil
		case outcomeNoRun:
			return res, nil
		}
		// outcomeGone: the tenure ended meanwhile; read the lease again.
	}
}

// owner returns the lease owner of thread. Without a lease provider it is
// the owner of this process's tenure, if any.
func (c *Controller) owner(ctx context.Context, thread string) (string, error) {
	if !c.leases {
		if c.rt != nil {
			if s := c.rt.localSession(thread); s != nil {
				select {
				case <-s.ready:
					if s.acquired {
						_, owner := s.current()
						return owner, nil
					}
				default:
				}
			}
		}
		return "", nil
	}
	return c.lp.GetLeaseOwner(ctx, LeaseKey(thread))
}

// ask sends a cancel request to process and waits for its answer.
func (c *Controller) ask(ctx context.Context, process, thread, reason, drop string) (cancelAnswer, error) {
	if err := c.subscribed(ctx); err != nil {
		if errors.Is(err, ErrClosed) {
			return cancelAnswer{}, err
		}
		return cancelAnswer{}, fmt.Errorf("%w: cancel thread %q: %w", ErrUnreachable, thread, err)
	}
	req := uuid.NewString()
	ch := make(chan cancelAnswer, 1)
	c.mu.Lock()
	c.waiting[req] = ch
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.waiting, req)
		c.mu.Unlock()
	}()
	ev := pubsub.Event{Type: cancelType, Metadata: map[string]string{metaReq: req, metaDrop: drop}}
	putName(ev.Metadata, metaThread, thread)
	putName(ev.Metadata, metaTo, process)
	putName(ev.Metadata, metaFrom, c.id)
	putName(ev.Metadata, metaReason, reason)
	if err := c.ps.Publish(ctx, ControlTopic, ev); err != nil {
		return cancelAnswer{}, fmt.Errorf("%w: cancel thread %q: send to %s: %w", ErrUnreachable, thread, process, err)
	}
	select {
	case a := <-ch:
		return a, nil
	case <-c.closedC:
		// Close unsubscribed: no answer can come in any more. The request
		// went out, so the owner may act on it.
		return cancelAnswer{}, fmt.Errorf("%w (the cancel of thread %q was sent to %s, which may act on it)", ErrClosed, thread, process)
	case <-ctx.Done():
		return cancelAnswer{}, fmt.Errorf("%w: %s did not answer the cancel of thread %q: %w", ErrUnreachable, process, thread, ctx.Err())
	}
}

// Status reads the status of thread from the shared state; see
// [Runtime.Status].
func (c *Controller) Status(ctx context.Context, thread string) (ThreadStatus, error) {
	if thread == "" {
		return ThreadStatus{}, fmt.Errorf("%w: thread is empty", ErrInvalid)
	}
	if c.isClosed() {
		return ThreadStatus{}, ErrClosed
	}
	st := ThreadStatus{Thread: thread, Queued: -1, InFlight: -1}
	if c.leases {
		if in, ok := c.lp.(lease.Inspector); ok {
			info, err := in.InspectLease(ctx, LeaseKey(thread))
			if err != nil {
				return ThreadStatus{}, fmt.Errorf("signals: status of thread %q: %w", thread, err)
			}
			st.Owner, st.Token, st.TTL = info.Owner, info.Token, info.TTL
		} else {
			owner, err := c.lp.GetLeaseOwner(ctx, LeaseKey(thread))
			if err != nil {
				return ThreadStatus{}, fmt.Errorf("signals: status of thread %q: %w", thread, err)
			}
			st.Owner = owner
		}
	}
	if st.Owner != "" {
		st.Process, st.RunID = processOf(st.Owner), runOf(st.Owner)
	}
	if br, ok := pubsub.As[pubsub.BacklogReader](c.ps); ok {
		bl, err := br.GroupBacklog(ctx, InboxTopic(thread), InboxGroup)
		if err != nil {
			return ThreadStatus{}, fmt.Errorf("signals: status of thread %q: %w", thread, err)
		}
		st.Queued, st.InFlight, st.LastSignal = bl.Lag, bl.Pending, bl.LastPublished
	}
	return st, nil
}

// List returns the status of every thread held by some process whose name
// starts with prefix, sorted by thread. It needs a lease provider with
// lease.Inspector (to list the thread leases); without one it returns an
// error wrapping ErrInvalid.
func (c *Controller) List(ctx context.Context, prefix string) ([]ThreadStatus, error) {
	if c.isClosed() {
		return nil, ErrClosed
	}
	in, ok := c.lp.(lease.Inspector)
	if !c.leases || !ok {
		return nil, fmt.Errorf("%w: listing threads needs a lease provider with lease.Inspector (%T has none)", ErrInvalid, c.ps)
	}
	infos, err := in.ListLeases(ctx, LeaseKey(prefix))
	if err != nil {
		return nil, fmt.Errorf("signals: list threads: %w", err)
	}
	out := make([]ThreadStatus, 0, len(infos))
	for _, info := range infos {
		st, err := c.Status(ctx, strings.TrimPrefix(info.Key, LeaseKey("")))
		if err != nil {
			return nil, err
		}
		if st.Owner == "" {
			continue // released since it was listed
		}
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b ThreadStatus) int { return strings.Compare(a.Thread, b.Thread) })
	return out, nil
}

// processOf returns the process part of a lease owner "<process>/<run id>".
func processOf(owner string) string {
	if i := strings.LastIndexByte(owner, '/'); i >= 0 {
		return owner[:i]
	}
	return owner
}

type cancelOutcome int

const (
	outcomeGone      cancelOutcome = iota // no tenure of the thread here (it ended or moved)
	outcomeNoRun                          // a tenure, between runs
	outcomeCancelled                      // a run's ctx was cancelled
)

// cancelAnswer is an owner's answer to a cancel request.
type cancelAnswer struct {
	outcome cancelOutcome
	runID   string
	token   uint64
}

// onControl handles the events of ControlTopic: requests addressed to this
// Runtime's process, answers addressed to this Controller.
func (c *Controller) onControl(_ context.Context, ev pubsub.Event) error {
	md := ev.Metadata
	switch ev.Type {
	case cancelType:
		thread := nameOf(md, metaThread)
		if c.rt == nil || nameOf(md, metaTo) != c.rt.cfg.process || thread == "" {
			return nil
		}
		cause := &CancelError{Thread: thread, Reason: nameOf(md, metaReason)}
		// The answer may come later, from the session's goroutine, which must
		// not wait for its publish: it goes out from a goroutine of its own,
		// which Close waits for.
		c.replies.Add(1)
		c.rt.cancelLocal(thread, cause, md[metaDrop], func(a cancelAnswer) {
			go func() {
				defer c.replies.Done()
				c.answer(md, a)
			}()
		})
	case cancelReplyType:
		if nameOf(md, metaTo) != c.id {
			return nil
		}
		a := cancelAnswer{runID: nameOf(md, metaRun)}
		switch md[metaOutcome] {
		case "cancelled":
			a.outcome = outcomeCancelled
		case "no-run":
			a.outcome = outcomeNoRun
		}
		_, _ = fmt.Sscan(md[metaToken], &a.token)
		c.mu.Lock()
		ch := c.waiting[md[metaReq]]
		c.mu.Unlock()
		if ch != nil {
			select {
			case ch <- a:
			default:
			}
		}
	}
	return nil
}

// answer publishes the answer a to the request whose metadata is req.
func (c *Controller) answer(req map[string]string, a cancelAnswer) {
	outcome := "gone"
	switch a.outcome {
	case outcomeCancelled:
		outcome = "cancelled"
	case outcomeNoRun:
		outcome = "no-run"
	}
	ev := pubsub.Event{Type: cancelReplyType, Metadata: map[string]string{
		metaReq: req[metaReq], metaOutcome: outcome, metaToken: fmt.Sprint(a.token),
	}}
	putName(ev.Metadata, metaTo, nameOf(req, metaFrom))
	copyName(ev.Metadata, req, metaThread)
	putName(ev.Metadata, metaRun, a.runID)
	var (
		ctx    context.Context
		cancel context.CancelFunc
	)
	if c.rt != nil {
		ctx, cancel = c.rt.stepCtx(DefaultControlTimeout) // Close waits for answers: not long past its ctx
	} else {
		ctx, cancel = context.WithTimeout(context.Background(), DefaultControlTimeout)
	}
	defer cancel()
	if err := c.ps.Publish(ctx, ControlTopic, ev); err != nil && c.rt != nil {
		c.rt.log.Warn("signals: answering a cancel request failed", "thread", nameOf(req, metaThread), "err", err)
	}
}

// Cancel cancels the running run of thread, wherever it runs: it reads the
// thread's lease to find the owning process and asks it (through
// ControlTopic, or directly when it is this process) to cancel the context
// of the run that holds the thread, with a *CancelError carrying reason as
// its context.Cause. It returns once the owner answered: Cancelled true
// when a run's ctx was cancelled, false when no run was active (nobody held
// the thread, or its holder was between runs: a no-op). A Cancel that
// reaches the owner while it hands the thread from one run to the next
// (TransferLease) cancels the run being started, as soon as it starts.
//
// The cancelled run's signals count as done (they are not run again), and
// the signals queued after it keep their order and run next, in new runs;
// with [DropQueued] the queued ones are dropped instead. The agent should
// return promptly once its ctx is done; what it does before returning (such
// as saving partial work) is up to it.
//
// Cancel fails closed: when the owner does not answer before ctx ends (or
// within DefaultControlTimeout when ctx has no deadline) it returns an error
// wrapping ErrUnreachable, never a silent success. Without a lease provider
// it can only cancel runs of this process. Bad input (empty thread or
// reason) returns an error wrapping ErrInvalid; after Close, ErrClosed.
func (rt *Runtime) Cancel(ctx context.Context, thread, reason string, opts ...CancelOption) (CancelResult, error) {
	if rt.isClosed() {
		return CancelResult{}, ErrClosed
	}
	return rt.ctl.Cancel(ctx, thread, reason, opts...)
}

// Status returns the state of thread read from the shared state, so any
// process answers the same: the owning process and run, the fencing token
// and time left of its lease, the signals queued and in flight, and when the
// last signal was sent. Fields the backends cannot tell are zero (-1 for the
// counts); see ThreadStatus. Bad input returns an error wrapping
// ErrInvalid; after Close, ErrClosed. On redisstreams it returns when ctx
// ends, also on a server that stopped answering (its reads, InspectLease
// and GroupBacklog, do: TestStatusReturnsAtCancelOnStalledServer).
func (rt *Runtime) Status(ctx context.Context, thread string) (ThreadStatus, error) {
	if rt.isClosed() {
		return ThreadStatus{}, ErrClosed
	}
	return rt.ctl.Status(ctx, thread)
}

// startControl subscribes the Runtime's Controller to ControlTopic.
func (rt *Runtime) startControl() error {
	rt.ctl = newController(rt.ps, rt.cfg.process, rt)
	return rt.ctl.subscribed(context.Background())
}
