package signals

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/leasebus/leasebus/internal/backoff"
	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/pubsub"
)

// Topic and group names the runtime uses on the pubsub.
const (
	// WorkTopic carries one wake notice per accepted signal; every runtime
	// consumes it as one member of WorkGroup.
	WorkTopic = "signals.work"
	// WorkGroup is the consumer group of WorkTopic.
	WorkGroup = "signals.runtimes"
	// InboxGroup is the group through which a thread's lease holder reads its
	// inbox (see InboxTopic).
	InboxGroup = "signals.owner"
	// WakeType is the event type of wake notices.
	WakeType = "signals.wake"
)

// Metadata keys of wake notices.
const (
	metaThread = "leasebus.signals.thread"
	metaSignal = "leasebus.signals.id"
	metaAction = "leasebus.signals.action" // the Action of the Send, when it succeeded
	metaOwner  = "leasebus.signals.owner"  // the owner a Forwarded Send found (givenup.go)
)

// InboxTopic returns the durable inbox topic of thread, "signals.thread.<thread>".
// Its lease key is the same string.
func InboxTopic(thread string) string { return "signals.thread." + thread }

// LeaseKey returns the lease key of thread (equal to its inbox topic).
func LeaseKey(thread string) string { return InboxTopic(thread) }

// CrossProcessReporter is an optional capability of a pubsub.PubSub: it
// reports whether its events cross process boundaries. New warns when it has
// to fall back to lease.Noop, unless the pubsub reports CrossProcess() false
// (then the fallback is exactly right and nothing is logged).
type CrossProcessReporter interface {
	CrossProcess() bool
}

var errRetry = errors.New("signals: wake notice not settled yet")

// Runtime makes sure one process at a time runs the agent for a thread, that
// signals sent to a thread from any process reach that owner, and that queued
// signals take over the thread without a gap. It is safe for concurrent use.
type Runtime struct {
	ps pubsub.PubSub
	// dd, br and ec are ps's pubsub.DrainedDeleter, pubsub.BacklogReader
	// and pubsub.EventChecker, found on it or on what it wraps
	// (pubsub.As); nil when it has none.
	dd     pubsub.DrainedDeleter
	br     pubsub.BacklogReader
	ec     pubsub.EventChecker
	lp     lease.Provider
	leases bool // lp is a real provider
	agent  Agent
	cfg    config
	keeper *lease.Keeper
	log    *slog.Logger
	done   doneCache

	hardCtx    context.Context // cancelled when Close gives up waiting
	hardCancel context.CancelFunc
	// tearCtx bounds the steps that end tenures and the runtime
	// (teardownCtx): cancelled closeGrace after Close gave up and every
	// run it cancelled returned, and a TTL after the later of Close's
	// start and the last run's return whatever Close's ctx
	// (tearAfterRuns), so that on a server that answers they still finish
	// (leases released, notices handed back) and on one that stopped
	// answering Close returns about closeGrace after the runs did (a TTL
	// when its ctx has not ended by then).
	tearCtx    context.Context
	tearCancel context.CancelFunc
	runsMu     sync.Mutex
	runs       int           // agents running now
	runsIdle   chan struct{} // closed when runs drops to 0 (nil: none waits)
	runsClosed bool          // Close began: no run starts any more (runStarted)
	lastRunEnd time.Time     // when the last run returned

	mu       sync.Mutex
	closed   bool
	closing  chan struct{}
	sessions map[string]*session
	wg       sync.WaitGroup // sessions
	workSub  pubsub.Subscription
	watchSub pubsub.Subscription // fan-out on WorkTopic: kicks local tenures
	ctl      *Controller         // control.go: Cancel, Status and the owner's side of a cancel

	closeOnce sync.Once
	closeErr  error
	closedCh  chan struct{}

	seenMu sync.Mutex
	seen   map[string]seenNotice // wake notice ID → when this process first received it (noticeSeen)
	ends   map[string]*tenureEnds
	// seenSweepAt and endsSweepAt are the sizes at which seen and ends
	// are next swept for old entries: noticeSeenMax, or twice what a
	// sweep left, so that a map of young entries (a deep backlog, many
	// threads) is not swept on every insert. seenSwept and endsSwept are
	// when they were last swept: a table of noticeSeenMax entries or more
	// is also swept by its first insert noticeSeenTTL after that, so that
	// a burst's entries go once they are old although the table does not
	// double again (review h59: a burst of 20,000 threads stayed through
	// an hour of later ones).
	seenSweepAt, endsSweepAt int
	seenSwept, endsSwept     time.Time

	// watching holds the threads one of this process's notice handlers
	// watches (watch.go).
	watchMu      sync.Mutex
	watching     map[string]*threadWatch
	watchSweepAt int
	watchSwept   time.Time // when watching was last swept

	// tidy holds the threads whose tenure ended without deleting a
	// drained inbox (the lease was lost, or the deletion failed), for
	// tidyLoop to try again; tidyKick wakes it, tidyDone is closed when it
	// returned.
	tidyMu   sync.Mutex
	tidy     map[string]*tidyEntry
	tidyKick chan struct{}
	tidyDone chan struct{}

	// lapse holds the threads whose holder's lease a notice handler waits
	// on, to try each the moment that lease can lapse (lapse.go).
	lapse lapseWatch

	// givenUp holds, per thread, the owners of this process's calls of
	// unknown outcome (acquires being or done settling, hand-offs whose
	// reply was lost): givenup.go; guLen is its length, read without guMu.
	guMu      sync.Mutex
	givenUp   map[string][]givenUpLease
	guSweepAt time.Time // when the oldest entry expires (zero: none)
	guLen     atomic.Int64
	// adopting holds the threads adoptLate is trying now (under mu).
	adopting map[string]bool
}

// seenNotice is a wake notice this process received and has not acked.
type seenNotice struct {
	first          time.Time // first received
	thread, signal string
}

// New returns a Runtime that runs agent for the threads sent to through ps.
// It detects the lease capability with lease.ProviderOf(ps); without one it
// falls back to lease.Noop (no cross-process exclusion) and logs one warning,
// unless ps implements CrossProcessReporter and reports false. New subscribes
// to WorkTopic (so that it takes over the threads of dead owners) and returns
// an error when that fails; bad options return an error wrapping ErrInvalid.
// Those subscriptions are made on a ctx that cannot end: on a server that
// does not answer, New returns when the client's timeouts and retries give
// up (on redisstreams, see "Clients and deadlines" there).
func New(ps pubsub.PubSub, agent Agent, opts ...Option) (*Runtime, error) {
	if ps == nil {
		return nil, fmt.Errorf("%w: pubsub is nil", ErrInvalid)
	}
	if agent == nil {
		return nil, fmt.Errorf("%w: agent is nil", ErrInvalid)
	}
	cfg := config{
		ttl: DefaultLeaseTTL, recovery: DefaultRecoveryInterval, linger: DefaultLinger,
		nextWait: DefaultNextWait, dedup: DefaultDedupeWindow, workConcurrency: DefaultWorkConcurrency,
	}
	for i, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: option %d is nil", ErrInvalid, i)
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	if cfg.renew == 0 {
		cfg.renew = cfg.ttl / 3
	}
	if cfg.renew >= cfg.ttl {
		return nil, fmt.Errorf("%w: renew interval %v is not shorter than lease ttl %v", ErrInvalid, cfg.renew, cfg.ttl)
	}
	if cfg.logger == nil {
		cfg.logger = slog.Default()
	}
	if cfg.process == "" {
		host, _ := os.Hostname()
		if host == "" {
			host = "host"
		}
		cfg.process = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), uuid.NewString()[:8])
	}
	lp, ok := lease.ProviderOf(ps)
	rt := &Runtime{
		ps: ps, lp: lp, leases: ok, agent: agent, cfg: cfg, log: cfg.logger,
		closing: make(chan struct{}), closedCh: make(chan struct{}),
		sessions: make(map[string]*session),
		tidyKick: make(chan struct{}, 1), tidyDone: make(chan struct{}),
		lapse: lapseWatch{kick: make(chan struct{}, 1), done: make(chan struct{})},
	}
	rt.dd, _ = pubsub.As[pubsub.DrainedDeleter](ps)
	rt.ec, _ = pubsub.As[pubsub.EventChecker](ps)
	rt.br, _ = pubsub.As[pubsub.BacklogReader](ps)
	if !ok {
		if r, isR := ps.(CrossProcessReporter); !isR || r.CrossProcess() {
			rt.log.Warn("signals: pubsub has no lease capability; falling back to lease.Noop: threads are not exclusive across processes",
				"pubsub", fmt.Sprintf("%T", ps))
		}
	}
	rt.keeper = lease.NewKeeper(lp, lease.KeeperOptions{RenewEvery: cfg.renew})
	rt.hardCtx, rt.hardCancel = context.WithCancel(context.Background())
	rt.tearCtx, rt.tearCancel = context.WithCancel(context.Background())
	// Notices that cannot be settled yet go back to the backend (a nack)
	// and come back after the recovery interval: a handler never waits for
	// a run to end.
	sub, err := ps.Subscribe(context.Background(), WorkTopic, rt.onNotice,
		pubsub.Group(WorkGroup), pubsub.StartFrom(pubsub.Earliest),
		pubsub.Concurrency(cfg.workConcurrency), pubsub.AckDeadline(cfg.ttl/2),
		pubsub.RedeliveryDelay(cfg.recovery), pubsub.RedeliveryCap(cfg.recovery))
	if err != nil {
		rt.hardCancel()
		rt.tearCancel()
		_ = rt.keeper.Close()
		return nil, fmt.Errorf("signals: subscribe %s: %w", WorkTopic, err)
	}
	rt.workSub = sub
	// Every runtime also sees every notice (fan-out, from now on): a
	// notice of a thread this process holds tells its tenure to read the
	// inbox, which it reads only when told (pubsub.ReadOnDemand).
	watch, err := ps.Subscribe(context.Background(), WorkTopic, rt.onWatch, pubsub.StartFrom(pubsub.Latest))
	if err != nil {
		_ = sub.Unsubscribe(context.Background())
		rt.hardCancel()
		rt.tearCancel()
		_ = rt.keeper.Close()
		return nil, fmt.Errorf("signals: subscribe %s (fan-out): %w", WorkTopic, err)
	}
	rt.watchSub = watch
	if err := rt.startControl(); err != nil {
		_ = watch.Unsubscribe(context.Background())
		_ = sub.Unsubscribe(context.Background())
		rt.hardCancel()
		rt.tearCancel()
		_ = rt.keeper.Close()
		return nil, err
	}
	go rt.tidyLoop()
	go rt.lapseLoop()
	return rt, nil
}

// ProcessID returns the name of this runtime in lease owners and events.
func (rt *Runtime) ProcessID() string { return rt.cfg.process }

func (rt *Runtime) emit(e Event) {
	if rt.cfg.observer == nil {
		return
	}
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	e.Process = rt.cfg.process
	rt.cfg.observer(e)
}

// newRun returns a fresh run ID and the lease owner of its tenure.
func (rt *Runtime) newRun() (runID, owner string) {
	runID = uuid.NewString()
	return runID, rt.cfg.process + "/" + runID
}

// runOf returns the run ID inside an owner string ("" when it has none).
func runOf(owner string) string {
	if i := strings.LastIndexByte(owner, '/'); i >= 0 {
		return owner[i+1:]
	}
	return ""
}

// Send accepts sig for thread: it either starts a run here (Woke), finds
// this process already holding the thread (Delivered), or reports the
// process that holds it (Forwarded), then stores the signal in the thread's
// durable inbox and publishes a wake notice, in that order and in one step
// (pubsub.BatchPublisher), and tells the local tenure, if any, to read its
// inbox. A tenure of this process that is ending (it stopped reading its
// inbox) is waited for, and the lease tried once it released. Once Send
// returned nil the signal is run even if this process exits at once, as
// long as some runtime stays alive. The fast path is two round trips (the
// acquire, then the inbox entry and the notice in one pipeline); one when
// this process holds the thread. (On a Redis Cluster, where the inbox and
// the work topic are in different hash slots, the inbox entry and the
// notice take one round trip each; so they do through a wrapper that hides
// pubsub.BatchPublisher.) A tenure this Send's acquire started does not end
// before the publish returned: Send then kicks it, also when the publish
// failed after storing the signal.
//
// Send returns when ctx ends, also on a server that stopped answering
// (TestSendReturnsAtCtxEndOnStalledServer: 0.3s with a 300ms ctx on a
// SIGSTOPped redis-server and a NewURL client; 10s before). An acquire it
// left behind may still take the thread's lease when the server answers
// again; the runtime tries that lease again for the same run, for up to a
// lease TTL, and when it has it starts the tenure, which reads the inbox
// and releases the thread when nothing waits (or, once Close began,
// releases it), so the thread does not stay leased to a run that never
// starts. One that Redis runs only after that (it was stopped, or the
// network held the connection's packets, for longer than a TTL), however
// many copies of it, is taken over when a Send, a wake notice or the lapse
// watch of this runtime next finds the thread leased to that run, or a
// peer's Send is forwarded to it (givenup.go:
// TestLateAcquireAfterSettleIsAdopted, TestLateStragglerAfterTakeover);
// Close releases such leases. This process remembers such runs for 10
// minutes; after that, or once it closed, a late copy leaves the thread to
// wait for the lease's TTL. Taking the thread over costs this Send a
// second acquire: when its ctx ends during that one, Send returns "not
// stored (retry it)" (TestShortSendToLateLease).
//
// Bad input returns an error wrapping ErrInvalid, before the thread's lease
// is tried, so that it starts no tenure: Metadata that no pubsub stores
// (pubsub.ValidateEvent), and, on a pubsub with pubsub.EventChecker (found
// through wrappers too) such as redisstreams, a signal or wake notice it
// would refuse (then wrapping pubsub.ErrInvalid too: a signal over
// Options.MaxEventSize, or a thread name or signal ID that makes the
// notice so). A refusal only when it publishes (a pubsub without the
// capability, or a wrapper that adds to the event, as the otel module adds
// its trace context, for a signal within those bytes of the limit) also
// wraps both, after the lease was taken: a tenure may have started for
// it. After Close, ErrClosed. Thread ids and signal IDs
// may hold any bytes (review h59: one that was not UTF-8 failed on
// redisstreams, where the wake notice's metadata is JSON; metaname.go).
// Any other error means the signal may or may not run: retry with the same
// signal ID, which is run once.
func (rt *Runtime) Send(ctx context.Context, thread string, sig Signal) (Accepted, error) {
	if thread == "" {
		return Accepted{}, fmt.Errorf("%w: thread is empty", ErrInvalid)
	}
	if sig.Type == "" {
		return Accepted{}, fmt.Errorf("%w: signal type is empty (thread %q)", ErrInvalid, thread)
	}
	if sig.Type == dropMarkType {
		// Cancel's drop marks carry it: such a signal would never run, and
		// would count as a mark in the done record.
		return Accepted{}, fmt.Errorf("%w: signal type %q is reserved (thread %q)", ErrInvalid, sig.Type, thread)
	}
	if err := pubsub.ValidateEvent(pubsub.Event{ID: sig.ID, Type: sig.Type, Metadata: sig.Metadata}); err != nil {
		// Before the acquire: a signal no pubsub stores starts no tenure
		// (TestSendBadMetadataStartsNoTenure).
		return Accepted{}, fmt.Errorf("%w: send %q to thread %q: %w", ErrInvalid, sig.ID, thread, err)
	}
	if rt.isClosed() {
		return Accepted{}, ErrClosed
	}
	if sig.ID == "" {
		sig.ID = uuid.NewString()
	}
	ev := pubsub.Event{ID: sig.ID, Type: sig.Type, Data: sig.Data}
	if len(sig.Metadata) > 0 {
		ev.Metadata = maps.Clone(sig.Metadata)
	}
	// The notice's ID names this copy of the signal: the kicks of its
	// news (this Send, the fan-out watch, the handler) are marked by it.
	notice := pubsub.Event{ID: uuid.NewString(), Type: WakeType, Metadata: noticeMeta(thread, sig.ID)}
	if rt.ec != nil {
		// Also before the acquire: what the pubsub would refuse (a
		// signal over redisstreams' MaxEventSize, a notice made too big
		// by a huge thread name or signal ID) starts no tenure
		// (TestOversizeSignalStartsNoTenure). The notice gets the action
		// and the owner's name after the acquire, a few dozen bytes.
		for _, c := range []struct {
			topic string
			ev    pubsub.Event
		}{{InboxTopic(thread), ev}, {WorkTopic, notice}} {
			if err := rt.ec.CheckEvent(c.topic, c.ev); err != nil {
				return Accepted{}, fmt.Errorf("%w: send %q to thread %q: %w", ErrInvalid, sig.ID, thread, err)
			}
		}
	}
	// The lease is tried before the signal and its notice are published:
	// no notice handler can learn of this signal before this Send's own
	// acquire was decided, so a handler that finds the thread free and
	// takes it never races this sender for it. A tenure this acquire
	// started reads the inbox when kicked below, after the publish.
	s, created, holder, werr := rt.wake(ctx, thread, false)
	if created {
		// Runs after the kick below, and also if the publish panics:
		// the tenure may end for want of deliveries from then on.
		defer s.sending.Add(-1)
	}
	if werr != nil && !errors.Is(werr, ErrClosed) && ctx.Err() != nil {
		// ctx ended during the acquire: nothing was published.
		return Accepted{}, fmt.Errorf("signals: send %q to thread %q: not stored (retry it): %w", sig.ID, thread, werr)
	}
	var acc Accepted
	switch {
	case errors.Is(werr, ErrClosed):
		// Stored durably; another runtime takes it.
		acc = Accepted{Action: Forwarded, SignalID: sig.ID}
	case werr != nil:
		// Stored anyway, with a notice whose handler takes the thread.
	case s == nil:
		acc = Accepted{Action: Forwarded, Owner: holder.owner, RunID: runOf(holder.owner), SignalID: sig.ID}
	default:
		acc = Accepted{Action: Delivered, SignalID: sig.ID}
		if created {
			acc.Action = Woke
		}
		acc.RunID, acc.Owner = s.current()
	}
	if acc.Action != 0 {
		notice.Metadata[metaAction] = acc.Action.String()
	}
	if acc.Action == Forwarded && acc.Owner != "" {
		putName(notice.Metadata, metaOwner, acc.Owner)
	}
	perr := rt.publishSignal(ctx, thread, ev, notice)
	if s != nil {
		// Read the inbox: the signal is there, also when only the notice
		// failed (then no notice would tell anyone). Stored for sure
		// only when the publish returned nil: then a kick for its
		// notice, from the fan-out watch, may have covered it already.
		if perr == nil {
			s.kickFor(notice.ID, bySend)
		} else {
			s.kick()
		}
	}
	if perr != nil {
		if errors.Is(perr, pubsub.ErrInvalid) {
			// The pubsub refused the signal as it is (one without
			// EventChecker, or a wrapper's additions: what was checked
			// above passed): bad input, nothing was stored.
			return Accepted{}, fmt.Errorf("%w: send %q to thread %q: %w", ErrInvalid, sig.ID, thread, perr)
		}
		return Accepted{}, fmt.Errorf("signals: send %q to thread %q: %w", sig.ID, thread, perr)
	}
	if s != nil && rt.closingNow() {
		// Close began while this Send was publishing: the local tenure
		// starts no run now, and a notice that says Woke or Delivered
		// keeps the peers' handlers off the thread for a recovery
		// interval. A copy without an Action has one take it as soon as
		// this process's tenure released it; the signal is stored, so
		// another runtime runs it, as when Close came before the acquire.
		plain := pubsub.Event{Type: WakeType, Metadata: noticeMeta(thread, sig.ID)}
		if err := rt.ps.Publish(ctx, WorkTopic, plain); err != nil {
			rt.log.Warn("signals: wake notice of a Send during Close failed", "thread", thread, "signal", sig.ID, "err", err)
		}
		acc = Accepted{Action: Forwarded, SignalID: sig.ID}
	}
	if acc.Action == 0 {
		return Accepted{}, fmt.Errorf("signals: send %q to thread %q: %w", sig.ID, thread, werr)
	}
	return rt.sent(thread, sig, acc), nil
}

// publishSignal stores ev in thread's inbox and then publishes its wake
// notice: in one step on a pubsub.BatchPublisher (the inbox entry first,
// with its group created if missing), otherwise one after the other.
func (rt *Runtime) publishSignal(ctx context.Context, thread string, ev, notice pubsub.Event) error {
	return publishSignal(ctx, rt.ps, thread, ev, notice)
}

// publishSignal is Runtime.publishSignal on ps.
func publishSignal(ctx context.Context, ps pubsub.PubSub, thread string, ev, notice pubsub.Event) error {
	if bp, ok := ps.(pubsub.BatchPublisher); ok {
		return bp.PublishBatch(ctx, []pubsub.Publication{
			{Topic: InboxTopic(thread), Group: InboxGroup, Event: ev},
			{Topic: WorkTopic, Event: notice},
		})
	}
	if err := publishInbox(ctx, ps, thread, ev); err != nil {
		return err
	}
	if err := ps.Publish(ctx, WorkTopic, notice); err != nil {
		return fmt.Errorf("wake notice: %w", err)
	}
	return nil
}

// publishInbox stores ev in thread's inbox. On a pubsub that can
// (pubsub.GroupPublisher) it creates the inbox group in the same step if
// it is missing, so that retention keeps ev until a tenure acked it, even
// when no tenure has subscribed yet.
func publishInbox(ctx context.Context, ps pubsub.PubSub, thread string, ev pubsub.Event) error {
	if gp, ok := ps.(pubsub.GroupPublisher); ok {
		return gp.PublishFor(ctx, InboxTopic(thread), InboxGroup, ev)
	}
	return ps.Publish(ctx, InboxTopic(thread), ev)
}

func (rt *Runtime) sent(thread string, sig Signal, a Accepted) Accepted {
	rt.emit(Event{Kind: Sent, Thread: thread, RunID: a.RunID, Owner: a.Owner, Action: a.Action, Signals: []Signal{sig}})
	return a
}

func (rt *Runtime) isClosed() bool {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.closed
}

// closingNow reports whether Close has begun, without rt.mu.
func (rt *Runtime) closingNow() bool {
	select {
	case <-rt.closing:
		return true
	default:
		return false
	}
}

// wake returns the local session of thread, starting one when this process
// wins the thread's lease; when another process holds it, it returns a nil
// session and the holder (its owner string and the time left on its lease,
// as the acquire saw them). Acquire errors are errors. A local session that
// takes no more deliveries (it is ending) is not returned: wake waits until
// it has released the lease and then tries the lease itself, so that no
// signal is reported Delivered to a tenure that stopped reading. (One that
// decides to end right after it was returned leaves the signal to the
// signal's wake notice, whose handler acts the moment the tenure ended.)
//
// A Send's acquire (not recovery) ends with ctx, so that Send returns when
// its ctx ends, also on a server that stopped answering. Whenever an
// acquire fails in a way that leaves its outcome unknown (ctx ended after
// it was sent, a timeout, a broken connection: the server may have run it,
// or may still), settleAcquire finds out in the background whether it took
// the lease, and if so starts the tenure it was for, so that the thread is
// not left leased to a run that never starts (see Send for what it does
// not cover).
func (rt *Runtime) wake(ctx context.Context, thread string, recovery bool) (s *session, created bool, holder holderInfo, err error) {
	return rt.wakeAs(ctx, thread, recovery, "", "")
}

// wakeAs is wake. With runID and owner set (settleAcquire) it tries the
// lease for that owner, a run an earlier acquire was for, and leaves an
// unknown outcome to its caller; otherwise for a new run.
func (rt *Runtime) wakeAs(ctx context.Context, thread string, recovery bool, runID, owner string) (s *session, created bool, holder holderInfo, err error) {
	settling := owner != ""
	for {
		rt.mu.Lock()
		s = rt.sessions[thread]
		if s == nil {
			break // rt.mu still held
		}
		rt.mu.Unlock()
		select {
		case <-s.ready:
		case <-ctx.Done():
			return nil, false, holderInfo{}, ctx.Err()
		}
		if !s.acquired {
			// Held by a run of this process that never started, which
			// that try is taking over (givenup.go), or revoked from such
			// a run, which that try releases before it tries the thread
			// again (adopt): look again rather than report it Forwarded
			// there or return the revocation
			// (TestSendToRevokedLateLease). Also when this try is a
			// takeover itself (settling): the try it waited for may have
			// found the lease before this one did and be taking it over
			// first (TestConcurrentSendsToLateLease/SecondFirst).
			late := s.holder.owner
			var re *lease.RevokedError
			if s.err != nil {
				late = ""
				if errors.As(s.err, &re) {
					late = re.Owner
				}
			}
			if _, ok := rt.givenUpRun(thread, late, time.Now()); ok {
				continue
			}
			return nil, false, s.holder, s.err
		}
		select {
		case <-s.quit:
		default:
			return s, false, holderInfo{}, nil
		}
		select {
		case <-s.ended:
		case <-ctx.Done():
			return nil, false, holderInfo{}, ctx.Err()
		}
	}
	if rt.closed {
		rt.mu.Unlock()
		return nil, false, holderInfo{}, ErrClosed
	}
	s = newSession(rt, thread)
	rt.sessions[thread] = s
	rt.wg.Add(1)
	rt.mu.Unlock()

	if !settling {
		runID, owner = rt.newRun()
	}
	// A Send's acquire ends with its ctx (TestSendReturnsAtCtxEndOnStalledServer:
	// 10s with a 300ms ctx before), a recovery's (a notice handler's, the
	// lapse watch's) only with Close giving up; both with Close giving up
	// (hardCtx): Close waits for this session (rt.wg), and an acquire in
	// flight to a server that stopped answering would hold it for
	// go-redis's timeouts and retries (TestCloseOnStalledServerUnderAcquireLoad).
	// An acquire cut short may still have taken the lease: settleAcquire
	// below finds out (and, once Close began, releases it). A settle's own
	// acquire ends with its ctx (the settle's end, a TTL after it began):
	// one cut short is for the same owner, remembered from the settle's
	// start (givenup.go).
	base := ctx
	if recovery && !settling {
		base = context.WithoutCancel(ctx)
	}
	kctx, kcancel := context.WithCancel(base)
	stop := context.AfterFunc(rt.hardCtx, kcancel)
	// And with tearCtx: Close's teardown ends a TTL after the runs
	// returned whatever its ctx, and it waits for this session (rt.wg); a
	// recovery's acquire sent into a black hole otherwise held it for
	// go-redis's timeouts and retries, or until Close's ctx ended
	// (TestCloseWithRecoveryAcquireInHole: 16.0s at TTL 2s with
	// context.Background()).
	stopTear := context.AfterFunc(rt.tearCtx, kcancel)
	var held *lease.Held
	sentNothing := kctx.Err() != nil // (then the outcome is known: not taken)
	if sentNothing {
		err = kctx.Err()
	} else {
		held, err = rt.keeper.Keep(kctx, LeaseKey(thread), owner, rt.cfg.ttl)
	}
	stop()
	stopTear()
	kcancel()
	if err != nil {
		var he *lease.HeldError
		if errors.As(err, &he) {
			s.holder = holderInfo{owner: he.Owner}
			if he.TTL > 0 {
				s.holder.lapse = time.Now().Add(he.TTL)
			}
		} else {
			s.err = err
		}
		rt.mu.Lock()
		delete(rt.sessions, thread)
		rt.mu.Unlock()
		close(s.ready)
		close(s.ended)
		if s.err == nil && !settling {
			if late, ok := rt.givenUpRun(thread, s.holder.owner, time.Now()); ok {
				// Held by a run of this process that never started (a
				// call of unknown outcome that Redis ran late:
				// givenup.go): take it over for that run.
				rt.wg.Done()
				if h := rt.cfg.hooks.beforeAdopt; h != nil {
					h(thread)
				}
				return rt.adopt(ctx, thread, recovery, late, s.holder.owner)
			}
		}
		if s.err != nil && !settling && !sentNothing && outcomeUnknown(s.err) {
			rt.noteGivenUp(thread, runID, owner, time.Now())
			rt.settleAcquire(thread, runID, owner) // (before wg.Done: Close waits for it)
		}
		rt.wg.Done()
		return nil, false, s.holder, s.err
	}
	s.held, s.runID, s.acquired = held, runID, true
	if settling {
		// A run of a call of unknown outcome starts now (a settle's try,
		// or a takeover of its late lease: givenup.go). A later copy of
		// that call must not start it again under the same Run.ID and
		// owner, whose late release copies would then delete the new
		// tenure's lease (review h69): such a copy's lease is released
		// and the thread taken for a new run, as after a failed release.
		rt.markGivenUpRan(thread, owner)
	}
	if !recovery {
		s.sending.Add(1) // a Send's acquire: it publishes the signal next (Send)
	}
	close(s.ready)
	kind := TenureStarted
	if recovery {
		kind = Recovered
	}
	rt.emit(Event{Kind: kind, Thread: thread, RunID: runID, Owner: owner, Token: held.Token()})
	go s.loop()
	return s, true, holderInfo{}, nil
}

// outcomeUnknown reports whether an acquire that failed with err may have
// taken the lease all the same: any error but bad input, a closed
// provider, a revoked tenure, a lease held by another owner and a call the
// provider says it never sent (lease.ErrNotSent: TestQueuedAcquireNeverSentSettlesNothing).
func outcomeUnknown(err error) bool {
	var re *lease.RevokedError
	return !errors.Is(err, lease.ErrInvalid) && !errors.Is(err, lease.ErrClosed) && !errors.As(err, &re) &&
		!errors.Is(err, lease.ErrNotSent)
}

// settleAcquire finds out whether an acquire of thread's lease for owner
// (run runID) whose outcome is unknown took it: a server that stopped
// answering may run it when it answers again, after its caller gave up.
// It tries the lease again for the same owner, which a lease that owner
// holds grants (keeping its token), after 50ms and then with a backoff up
// to the recovery interval, until that settles it: the lease granted (a
// Recovered tenure starts and reads the inbox, and releases the thread
// when nothing waits), held by another owner (the first acquire did not
// take it, or lost it since), or a local tenure of the thread (a result
// that says the lease is held by this very owner, a Send's try it waited
// for, is tried again). It gives up after a lease TTL; a copy of the
// acquire that Redis runs after that is taken over when it is found, since
// the owner is remembered from the start (givenup.go).
// When Close begins it releases the lease for that owner instead (a no-op
// unless the first acquire took it; bounded by closeGrace and by Close
// giving up), so that the live runtimes can take the thread at once
// (TestCloseReleasesLeasesOfGivenUpSends: 4-36 of 50 threads waited a
// whole TTL without). Close waits for it (rt.wg). Without the settle such
// a thread stayed leased to a run that never started for a whole TTL, and
// the signals sent to it meanwhile waited as long
// (TestSendReturnsAtCtxEndOnStalledServer).
func (rt *Runtime) settleAcquire(thread, runID, owner string) {
	rt.wg.Add(1)
	go func() {
		defer rt.wg.Done()
		giveUp := time.Now().Add(rt.cfg.ttl)
		bo := backoff.Backoff{Policy: backoff.Policy{Min: 50 * time.Millisecond, Max: rt.cfg.recovery}}
		handBack := func() {
			ctx, cancel := context.WithTimeout(rt.hardCtx, closeGrace)
			defer cancel()
			defer context.AfterFunc(rt.tearCtx, cancel)() // the teardown's end bounds it too
			if err := rt.lp.ReleaseLease(ctx, LeaseKey(thread), owner); err != nil && !errors.Is(err, lease.ErrNotHeld) {
				rt.log.Warn("signals: releasing a lease a given-up acquire may have taken failed; it expires after its TTL",
					"thread", thread, "owner", owner, "err", err)
			}
		}
		for time.Now().Before(giveUp) {
			t := time.NewTimer(bo.Next())
			select {
			case <-t.C:
			case <-rt.closing:
				t.Stop()
				handBack()
				return
			}
			ctx, cancel := context.WithDeadline(rt.hardCtx, giveUp)
			s, _, holder, err := rt.wakeAs(ctx, thread, true, runID, owner)
			cancel()
			switch {
			case err == nil && s == nil && holder.owner == owner:
				// The result of a Send's try that this one waited for:
				// held by this very owner. Try again (that Send, finding
				// it so, took it over itself: givenup.go).
			case err == nil:
				// Taken (a tenure of this run or of another one runs
				// here), or held by another owner: settled. A copy of
				// the first acquire that comes later is taken over when
				// it is found (givenup.go).
				if s != nil {
					s.kick()
				}
				return
			case errors.Is(err, ErrClosed):
				handBack()
				return
			case errors.Is(err, lease.ErrNotSent):
				// This try was not sent; the first acquire is still
				// unknown: try again.
			case !outcomeUnknown(err):
				return
			}
		}
	}()
}

func (rt *Runtime) removeSession(s *session) {
	rt.mu.Lock()
	if rt.sessions[s.thread] == s {
		delete(rt.sessions, s.thread)
	}
	rt.mu.Unlock()
}

// isDone reports whether thread ran signal id: in this process's cache or
// in the thread's done record.
func (rt *Runtime) isDone(ctx context.Context, thread, id string) (bool, error) {
	if rt.done.has(thread, id) {
		return true, nil
	}
	if !rt.leases {
		return false, nil
	}
	rec, err := rt.lp.GetLeaseOwner(ctx, recordKey(thread))
	if err != nil {
		return false, err
	}
	rt.watchedRecord(thread, rec, time.Now())
	return recordHas(rec, id), nil
}

// noticePollFirst is the first wait of a wake notice handler that found the
// thread held by another process; each later wait doubles, up to the
// recovery interval (with the default 1s: about six checks in the first
// second, then one per second). It only paces how soon a notice is acked
// after its signal ran: a signal sent to a tenure that is ending does not
// wait for it (afterRelease and the watcher's owed try, watch.go).
const noticePollFirst = 20 * time.Millisecond

// onNotice handles a wake notice: it acks it once the signal it names has
// been run (here or by whichever process owned the thread), taking the
// thread's lease when it is free, and nacks when it held the notice for half
// its ack deadline so that another runtime (or this one) retries.
//
// While this process holds the thread, it waits for the local tenure to run
// the signal or end, and acts at once when it ended. While another process
// holds it, it checks the done record and the lease again after
// noticePollFirst, backing off to every recovery interval. A holder that was
// ending when the signal was sent (it had stopped reading its inbox and not
// yet released) finds the signal itself once it released (afterRelease),
// unless the notice came after the release: then the first attempt here
// takes the thread.
//
// It never waits before its first attempt: Send publishes the notice only
// after its own acquire was decided, so a free lease here means nobody is
// about to take the thread for this signal. The one exception is the notice
// of a Woke send (first delivery): that sender's own tenure took the lease
// just before the signal was stored, does not end before the Send's publish
// returned, and is kicked then, so it reads the signal unless it loses the
// lease; the handler leaves the lease alone for one recovery interval,
// checking only the done record with the backoff.
func (rt *Runtime) onNotice(ctx context.Context, ev pubsub.Event) error {
	err := rt.handleNotice(ctx, ev)
	if err == nil {
		rt.noticeDone(ev.ID)
	}
	if err != nil && rt.isClosed() {
		// Closing: hand the notice to the live runtimes at once (a copy
		// they can take now, then the ack of this one) rather than leave it
		// pending here until its ack deadline.
		cp := pubsub.Event{Type: WakeType, Metadata: make(map[string]string, 2)}
		copyName(cp.Metadata, ev.Metadata, metaThread)
		copyName(cp.Metadata, ev.Metadata, metaSignal)
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rt.cfg.ttl)
		defer cancel()
		if perr := rt.ps.Publish(pctx, WorkTopic, cp); perr == nil {
			rt.noticeDone(ev.ID)
			return nil
		}
	}
	return err
}

// teardownCtx bounds a step of a tenure or of Close that no caller's ctx
// bounds (a release, an inbox deletion, an unsubscribe, a hand-back, the
// done record's first read, a hand-off's transfer) by the lease TTL; stepCtx
// by d.
func (rt *Runtime) teardownCtx() (context.Context, context.CancelFunc) {
	return rt.stepCtx(rt.cfg.ttl)
}

// stepCtx returns a context that ends after d, or with tearCtx.
func (rt *Runtime) stepCtx(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(rt.tearCtx, d)
}

// runStarted and runEnded count the agents running (see tearCtx).
// runStarted reports false, counting nothing, once Close began: then the
// run must not start (Close starts no run, and its teardown may already
// be over: tearAfterRuns decides under runsMu). Otherwise it returns when
// it committed to the run, read under runsMu, so that it is before the
// Closing event's Time (the RunStarted event's Time).
func (rt *Runtime) runStarted() (time.Time, bool) {
	rt.runsMu.Lock()
	defer rt.runsMu.Unlock()
	if rt.runsClosed {
		return time.Time{}, false
	}
	rt.runs++
	return time.Now(), true
}

func (rt *Runtime) runEnded() {
	rt.runsMu.Lock()
	rt.runs--
	rt.lastRunEnd = time.Now()
	if rt.runs == 0 && rt.runsIdle != nil {
		close(rt.runsIdle)
		rt.runsIdle = nil
	}
	rt.runsMu.Unlock()
}

// tearAfterRuns cancels tearCtx once no agent runs and grace has passed
// since the later of its call and the last run's return, unless done
// closes first. Close calls it with closeGrace once its ctx ended (the
// runs' contexts are cancelled by then), and with the lease TTL as it
// begins: whatever its ctx, the teardown then ends about a TTL after the
// last run returned, when nothing it could still do matters (the leases it
// would release have expired, the notices it would hand back come back
// after their ack deadline). Before, Close(context.Background()) on a
// server that stopped answering waited for each step's own timeouts in
// turn: 35s with the default 15s TTL (TestCloseNoDeadlineOnStalledServer).
// The decision is made under runsMu after Close set runsClosed, so no run
// starts after it (runStarted), and a run that started just before it
// counts (TestCloseRunStartingAtClose).
func (rt *Runtime) tearAfterRuns(done <-chan struct{}, grace time.Duration) {
	since := time.Now()
	for {
		rt.runsMu.Lock()
		if rt.runs > 0 {
			if rt.runsIdle == nil {
				rt.runsIdle = make(chan struct{})
			}
			idle := rt.runsIdle
			rt.runsMu.Unlock()
			select {
			case <-idle:
			case <-done:
				return
			}
			continue
		}
		end := since.Add(grace)
		if rt.lastRunEnd.After(since) {
			end = rt.lastRunEnd.Add(grace)
		}
		wait := time.Until(end)
		if wait <= 0 {
			rt.tearCancel()
			rt.runsMu.Unlock()
			return
		}
		rt.runsMu.Unlock()
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-done:
			t.Stop()
			return
		}
	}
}

// handBackNotices runs as Close ends, after the tenures released their
// threads: it publishes a copy of every wake notice this process received
// and did not ack (those it nacked and the backend holds for their
// redelivery delay), so that a live runtime, or one that starts later,
// takes them at once, not after their ack deadline. The originals, handed
// back by the work subscription's Unsubscribe, come back to some runtime
// too and are acked once their signal is done: a duplicate notice costs a
// check, never a run.
func (rt *Runtime) handBackNotices() error {
	rt.seenMu.Lock()
	held := rt.seen
	rt.seen = nil
	rt.seenMu.Unlock()
	var errs []error
	ctx, cancel := rt.teardownCtx()
	defer cancel()
	for _, n := range held {
		cp := pubsub.Event{Type: WakeType, Metadata: noticeMeta(n.thread, n.signal)}
		if err := rt.ps.Publish(ctx, WorkTopic, cp); err != nil {
			errs = append(errs, fmt.Errorf("signals: hand back wake notice of %q on thread %q: %w", n.signal, n.thread, err))
			if ctx.Err() != nil || errors.Is(err, pubsub.ErrClosed) {
				break
			}
		}
	}
	if len(errs) > 0 {
		rt.log.Warn("signals: some wake notices were not handed back; they come back after their ack deadline",
			"failed", len(errs), "err", errs[0])
	}
	return nil
}

// onWatch sees every wake notice (fan-out) and kicks the local tenure of
// its thread, if any, so that it reads its inbox: that is how a signal sent
// from another process reaches the owner's run. Notices of threads this
// process does not hold are ignored here (the WorkGroup handlers recover
// those).
func (rt *Runtime) onWatch(_ context.Context, ev pubsub.Event) error {
	thread := nameOf(ev.Metadata, metaThread)
	if thread == "" {
		return nil
	}
	rt.mu.Lock()
	s := rt.sessions[thread]
	rt.mu.Unlock()
	if s != nil {
		s.kickFor(ev.ID, byWatch)
	} else if rt.guLen.Load() > 0 {
		if o := nameOf(ev.Metadata, metaOwner); o != "" {
			rt.adoptLate(thread, o) // forwarded to a run of ours that never started (givenup.go)
		}
	}
	return nil
}

// noticeSeen returns when this process first received the notice id (now,
// the first time). The map forgets entries older than noticeSeenTTL when it
// grows past noticeSeenMax (then past twice what the last sweep left, so
// that sweeps cost O(1) per insert, or at its first insert noticeSeenTTL
// after the last sweep), so it stays bounded by what arrives within
// noticeSeenTTL; a forgotten notice counts as first received now,
// which only delays its ack.
func (rt *Runtime) noticeSeen(id, thread, signal string, now time.Time) time.Time {
	rt.seenMu.Lock()
	defer rt.seenMu.Unlock()
	if n, ok := rt.seen[id]; ok {
		return n.first
	}
	if rt.seen == nil {
		rt.seen = make(map[string]seenNotice)
	}
	if len(rt.seen) >= noticeSeenMax && (len(rt.seen) >= rt.seenSweepAt || now.Sub(rt.seenSwept) > noticeSeenTTL) {
		for k, n := range rt.seen {
			if now.Sub(n.first) > noticeSeenTTL {
				delete(rt.seen, k)
			}
		}
		rt.seenSweepAt, rt.seenSwept = 2*len(rt.seen), now
	}
	rt.seen[id] = seenNotice{first: now, thread: thread, signal: signal}
	return now
}

// tenureEnds is what this process remembers of the clean ends (released,
// not lost) of its recent tenures of one thread, for notices whose signal
// left the done record (settledByTenures).
type tenureEnds struct {
	drained time.Time   // start of the latest tenure that left the inbox drained
	clean   []time.Time // starts of the latest (at most staleTenures) clean tenures
	at      time.Time   // when the latest of them ended
}

// staleTenures is how many clean tenures that did not meet a notice's signal
// settle the notice on a pubsub that cannot tell whether a tenure drained
// the inbox.
const staleTenures = 10

// noteTenureEnd records the end of a tenure of thread that started at
// started. Like the seen map, the table forgets entries older than
// noticeSeenTTL once it holds noticeSeenMax of them, at an insert (one that
// doubled it since the last sweep, or the first noticeSeenTTL after it):
// a runtime that gets no new thread keeps what it has.
func (rt *Runtime) noteTenureEnd(thread string, started time.Time, clean, drained bool) {
	rt.noteTenureEndAt(thread, started, clean, drained, time.Now())
}

// noteTenureEndAt is noteTenureEnd at time now.
func (rt *Runtime) noteTenureEndAt(thread string, started time.Time, clean, drained bool, now time.Time) {
	if !clean {
		return
	}
	rt.seenMu.Lock()
	defer rt.seenMu.Unlock()
	if rt.ends == nil {
		rt.ends = make(map[string]*tenureEnds)
	}
	if len(rt.ends) >= noticeSeenMax && (len(rt.ends) >= rt.endsSweepAt || now.Sub(rt.endsSwept) > noticeSeenTTL) {
		for k, e := range rt.ends {
			if now.Sub(e.at) > noticeSeenTTL {
				delete(rt.ends, k)
			}
		}
		rt.endsSweepAt, rt.endsSwept = 2*len(rt.ends), now
	}
	e := rt.ends[thread]
	if e == nil {
		e = &tenureEnds{}
		rt.ends[thread] = e
	}
	e.at = now
	if drained && started.After(e.drained) {
		e.drained = started
	}
	e.clean = append(e.clean, started)
	if len(e.clean) > staleTenures {
		e.clean = e.clean[len(e.clean)-staleTenures:]
	}
}

// settledByTenures reports whether tenures of this process that started
// after a notice was first received (so after its signal was in the inbox)
// settle it although its signal is not in the done record: one that took
// and acked every entry and left the inbox drained (the signal was run, or
// skipped as a duplicate, and fell out of the record), or, on a pubsub that
// cannot tell whether the inbox was drained, staleTenures clean ones.
func (rt *Runtime) settledByTenures(thread string, received time.Time) bool {
	rt.seenMu.Lock()
	defer rt.seenMu.Unlock()
	e := rt.ends[thread]
	if e == nil {
		return false
	}
	if e.drained.After(received) {
		return true
	}
	n := 0
	for _, t := range e.clean {
		if t.After(received) {
			n++
		}
	}
	return n >= staleTenures
}

// noticeDone forgets an acked notice.
func (rt *Runtime) noticeDone(id string) {
	rt.seenMu.Lock()
	delete(rt.seen, id)
	rt.seenMu.Unlock()
}

const (
	noticeSeenMax = 4096
	noticeSeenTTL = 10 * time.Minute
)

// noticeHold bounds how long a wake notice handler holds a notice it cannot
// settle yet (its signal is not done) before it nacks it, to come back after
// the recovery interval: a quarter of the TTL, at most 250ms on a notice's
// first delivery (enough for a short run of the signal to settle it at
// once) and 20ms on later ones. Handlers are a fixed number of slots
// (WithWorkConcurrency): because none waits longer, and only one per thread
// waits at all (watch.go), notices of threads busy with long runs never
// keep a notice of another thread (a dead owner's, say) from being handled.
func noticeHold(cfg config, attempt int) time.Duration {
	if attempt > 1 {
		return min(cfg.ttl/4, noticeHoldRetry)
	}
	return min(cfg.ttl/4, noticeHoldFirst)
}

const (
	noticeHoldFirst = 250 * time.Millisecond
	noticeHoldRetry = 20 * time.Millisecond
)

// handleNotice is onNotice's work; an error (a nack) means the signal is
// not known to be done.
func (rt *Runtime) handleNotice(ctx context.Context, ev pubsub.Event) error {
	thread, id := nameOf(ev.Metadata, metaThread), nameOf(ev.Metadata, metaSignal)
	if thread == "" || id == "" {
		rt.log.Warn("signals: dropping malformed wake notice", "id", ev.ID)
		return nil
	}
	// From the first time this process received the notice: a tenure that
	// started after that started after the signal was in the inbox, also
	// when the notice comes back after a nack.
	received := rt.noticeSeen(ev.ID, thread, id, time.Now())
	hold := time.NewTimer(noticeHold(rt.cfg, ev.DeliveryAttempt))
	defer hold.Stop()
	watching := false
	tryAt := received // when to start trying the lease
	if ev.Metadata[metaAction] == Woke.String() && ev.DeliveryAttempt <= 1 {
		tryAt = received.Add(rt.cfg.recovery)
	} else {
		// One handler per thread waits on it and checks it (watch.go);
		// the others settle from what it and this process know, or nack
		// at once. (The first delivery of a Woke send's notice, one per
		// tenure started, stays out of this: it does not try the lease
		// for a recovery interval, so it must not keep a notice that
		// would from doing so.)
		if !rt.watchThread(thread, ev.DeliveryAttempt > 1, time.Now()) {
			return rt.followNotice(thread, id, ev.ID, received)
		}
		defer func() {
			if rt.unwatchThread(thread) {
				rt.settleOwed(ctx, thread)
			}
		}()
		watching = true
	}
	poll := backoff.Backoff{Policy: backoff.Policy{Min: noticePollFirst, Max: rt.cfg.recovery}}
	if ev.DeliveryAttempt > 1 {
		// A retry: a handler held this notice before (for a quarter of the
		// TTL, unless it failed), so any tenure that was ending when the
		// signal was sent is long gone, and the short first waits are not
		// needed. Checking every recovery interval keeps a long run
		// elsewhere with many queued signals from costing a burst of
		// checks per notice per retry.
		poll.Min = rt.cfg.recovery
	}
	for {
		select {
		case <-rt.closing:
			return errRetry
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		rt.mu.Lock()
		s := rt.sessions[thread]
		rt.mu.Unlock()
		if s != nil {
			s.kickFor(ev.ID, byNotice) // the notice may be the owner's only news of the signal
			switch s.await(id, hold.C, rt.closing) {
			case awaitDone:
				// Acked after the inbox entry's ack (session.handle);
				// until then the notice comes back (review h68).
				if !s.awaitAck(id, hold.C, rt.closing) {
					return errRetry
				}
				return nil
			case awaitTimeout:
				return errRetry
			case awaitEnded:
				// Over without the signal: the record and this
				// process's tenures of the thread tell the rest.
			}
		}
		done, err := rt.isDone(ctx, thread, id)
		if err != nil {
			return err
		}
		if done {
			// Its run's process may have died before its inbox ack was
			// written: look at the inbox once that run's lease lapsed
			// (noteDone).
			rt.noteDone(thread, id, received)
			return nil
		}
		if rt.settledByTenures(thread, received) {
			return nil
		}
		if !time.Now().Before(tryAt) {
			if watching {
				rt.watchTrying(thread)
			}
			var h holderInfo
			s, _, h, err = rt.wake(ctx, thread, true)
			if err != nil {
				return err
			}
			if s != nil {
				continue // a local tenure: wait for it
			}
			// Held elsewhere: try again the moment its lease can lapse
			// (lapse.go), not only when this notice comes back.
			rt.noteHeld(thread, id, received, h.lapse, time.Now())
		}
		wait := time.NewTimer(min(poll.Next(), rt.cfg.recovery))
		select {
		case <-wait.C:
		case <-hold.C:
			wait.Stop()
			return errRetry
		case <-rt.closing:
			wait.Stop()
			return errRetry
		case <-ctx.Done():
			wait.Stop()
			return ctx.Err()
		}
	}
}

// Close stops taking signals (Send returns ErrClosed), stops taking wake
// notices, lets running runs finish and hands their leases back. When ctx
// ends first it cancels the runs' contexts, waits for them to return and
// returns ctx.Err(); its teardown (releases, hand-backs) may then take
// closeGrace (1s) after the last run returned and no longer, so on a server
// that stopped answering it returns about a second after the runs did,
// also when a hand-off's TransferLease was in flight to that server
// (TestCloseOnStalledServerLiveRuns; TestCloseOnStalledServerHandOff:
// Close(ctx 1s) returned after 2.0s, where it waited 10.0s for go-redis's
// timeouts before the hand-off was bounded too), and when the server stops
// under load, with lease calls, done records and hand-offs in flight
// (TestCloseOnStalledServerUnderLoad: 2.0s; 30-51s before those were
// bounded by Close giving up too), and what it did not finish
// is safe to leave: leases not released expire after their TTL, wake notices not
// handed back come back after their ack deadline, and an inbox not deleted
// is deleted by its thread's next tenure. Whatever its ctx, its teardown
// ends about a lease TTL after the last run returned, or after Close began
// when no run was left (also with
// context.Background(), which cancels no run), also on a server that
// stopped answering (TestCloseNoDeadlineOnStalledServer, TTL 3s: 3.0s after the
// run returned, where each step waited for go-redis's timeouts in turn
// before: 21.0s; with the default 15s TTL and 5 lingering tenures, 15.0s
// where it was 35s), also when a notice handler's lease try was in flight
// as its path to Redis went dead (TestCloseWithRecoveryAcquireInHole, TTL
// 2s: 2.0s, where it waited 16.0s for that call);
// pass a ctx with a deadline to bound the runs too (on SIGTERM, shorter
// than what the supervisor waits before SIGKILL). It does not close the pubsub. It
// is idempotent and safe to call concurrently; every call waits for the
// shutdown to complete.
func (rt *Runtime) Close(ctx context.Context) error {
	var began time.Time // set by the call that closes
	rt.closeOnce.Do(func() {
		// No run starts from here on (runStarted), before anything else
		// can see that Close began (rt.closing, Send's ErrClosed).
		rt.runsMu.Lock()
		rt.runsClosed = true
		began = time.Now() // the Closing event's Time
		rt.runsMu.Unlock()
		rt.mu.Lock()
		rt.closed = true
		close(rt.closing)
		rt.mu.Unlock()
		go rt.tearAfterRuns(rt.closedCh, max(rt.cfg.ttl, closeGrace))
		go func() {
			defer close(rt.closedCh)
			// Every step below is bounded by tearCtx: closeGrace after
			// Close's ctx ended and the runs returned, and a TTL after the
			// runs returned whatever ctx, none waits any more for a server
			// that stopped answering (leases then expire, held notices
			// come back after their ack deadline, inboxes are deleted by a
			// later tenure).
			uerr := rt.workSub.Unsubscribe(rt.tearCtx)
			if errors.Is(uerr, pubsub.ErrClosed) || errors.Is(uerr, context.Canceled) {
				uerr = nil
			}
			werr := rt.watchSub.Unsubscribe(rt.tearCtx)
			if errors.Is(werr, pubsub.ErrClosed) || errors.Is(werr, context.Canceled) {
				werr = nil
			}
			uerr = errors.Join(uerr, werr)
			rt.wg.Wait()
			<-rt.tidyDone
			<-rt.lapse.done
			rt.tidyLast()
			rt.releaseGivenUp(rt.tearCtx)
			_ = rt.handBackNotices()
			cerr := rt.ctl.Close() // cancels from now on are unreachable: fail closed
			rt.hardCancel()
			rt.tearCancel()
			_ = rt.keeper.Close()
			rt.closeErr = errors.Join(uerr, cerr)
		}()
	})
	if !began.IsZero() {
		// Outside closeOnce and after the teardown started: an observer
		// may call Close (it then waits for the teardown) or be slow
		// without holding the teardown's clock back.
		rt.emit(Event{Kind: Closing, Time: began})
	}
	select {
	case <-rt.closedCh:
		return rt.closeErr
	case <-ctx.Done():
		rt.hardCancel()
		rt.tearAfterRuns(rt.closedCh, closeGrace)
		<-rt.closedCh
		return ctx.Err()
	}
}

// closeGrace is how long the teardown of a Close whose ctx ended may still
// talk to the server once the runs returned: enough for a server that
// answers to take the releases and hand-backs, also after a run that
// returned late (TestCloseCtxEndedHealthyServerReleases), short enough that
// Close on one that stopped answering returns soon after
// (TestCloseOnStalledServerLiveRuns).
const closeGrace = time.Second

// tidyEntry is a thread whose drained inbox is to be deleted: tried again
// at next, after wait.
type tidyEntry struct {
	next time.Time
	wait time.Duration
}

// tidyMaxWait bounds the wait between two tries of a thread's deletion.
const tidyMaxWait = time.Minute

// tidyLater has tidyLoop delete thread's inbox if it is drained: at once,
// then, while that fails, after the recovery interval, doubling up to
// tidyMaxWait. That is for a tenure that ended without deleting it: its
// lease was lost (then another process may hold the thread, and the inbox is
// deleted only if nothing in it is unread or pending, in one step), or the
// deletion failed (the server did not answer). Without it such an inbox
// stayed for good once its thread went idle: no notice names the thread any
// more, so no tenure comes to delete it. An entry goes once a deletion was
// decided (deleted, or found in use: whoever uses it deletes it), when a
// local tenure holds the thread again, or at Close (the last try).
func (rt *Runtime) tidyLater(thread string) {
	if rt.dd == nil {
		return
	}
	rt.tidyMu.Lock()
	if rt.tidy == nil {
		rt.tidy = make(map[string]*tidyEntry)
	}
	rt.tidy[thread] = &tidyEntry{next: time.Now(), wait: rt.cfg.recovery}
	rt.tidyMu.Unlock()
	select {
	case rt.tidyKick <- struct{}{}:
	default:
	}
}

// tidyLoop runs tidyDue whenever an entry is due, until Close begins.
func (rt *Runtime) tidyLoop() {
	defer close(rt.tidyDone)
	rt.dueLoop(rt.tidyKick, rt.tidyDue)
}

// dueLoop calls due when kick is sent and at the time due last returned
// (zero: not until the next kick), until Close begins.
func (rt *Runtime) dueLoop(kick <-chan struct{}, due func(now time.Time) (next time.Time)) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		select {
		case <-rt.closing:
			return
		case <-kick:
		case <-timer.C:
		}
		next := due(time.Now())
		timer.Stop()
		if !next.IsZero() {
			timer.Reset(time.Until(next))
		}
	}
}

// tidyDue tries the entries due at now and returns when the next one is due
// (zero: none left).
func (rt *Runtime) tidyDue(now time.Time) time.Time {
	rt.tidyMu.Lock()
	var due []string
	for th, e := range rt.tidy {
		if !e.next.After(now) {
			due = append(due, th)
		}
	}
	rt.tidyMu.Unlock()
	for _, th := range due {
		if rt.closingNow() {
			break
		}
		rt.tidyOne(th, now)
	}
	rt.tidyMu.Lock()
	defer rt.tidyMu.Unlock()
	var next time.Time
	for _, e := range rt.tidy {
		if next.IsZero() || e.next.Before(next) {
			next = e.next
		}
	}
	return next
}

// tidyOne tries to delete thread's drained inbox once and updates its entry.
func (rt *Runtime) tidyOne(thread string, now time.Time) {
	rt.mu.Lock()
	local := rt.sessions[thread] != nil
	rt.mu.Unlock()
	if !local {
		// Bounded by Close giving up too (hardCtx): Close waits for it.
		ctx, cancel := context.WithTimeout(rt.hardCtx, rt.cfg.ttl)
		gone, err := rt.dd.DeleteTopicIfDrained(ctx, InboxTopic(thread), InboxGroup)
		if err == nil && !gone {
			// Not drained: a signal waits in the inbox, perhaps one that
			// no notice will bring a tenure to (stored by a Send whose
			// notice failed, or lost with a master that failed over,
			// while this tenure's deletion failed): take the thread if it
			// is free, as a releasing tenure does
			// (TestTidyWakesAnInboxLeftUnread).
			rt.wakeIfWaiting(ctx, thread)
		}
		cancel()
		if err != nil {
			rt.tidyMu.Lock()
			if e := rt.tidy[thread]; e != nil {
				e.next = now.Add(e.wait)
				e.wait = min(2*e.wait, tidyMaxWait)
			}
			rt.tidyMu.Unlock()
			return
		}
	}
	rt.tidyMu.Lock()
	delete(rt.tidy, thread)
	rt.tidyMu.Unlock()
}

// tidyLast tries every entry left once, as Close ends (within one TTL in
// all, and not once Close's ctx ended): a server that does not answer by
// then leaves those inboxes.
func (rt *Runtime) tidyLast() {
	rt.tidyMu.Lock()
	left := make([]string, 0, len(rt.tidy))
	for th := range rt.tidy {
		left = append(left, th)
	}
	rt.tidy = nil
	rt.tidyMu.Unlock()
	if len(left) == 0 {
		return
	}
	dd := rt.dd
	ctx, cancel := rt.teardownCtx()
	defer cancel()
	for _, th := range left {
		if _, err := dd.DeleteTopicIfDrained(ctx, InboxTopic(th), InboxGroup); err != nil && ctx.Err() != nil {
			rt.log.Warn("signals: drained inboxes left at Close; they stay until a tenure of their thread deletes them",
				"left", len(left), "err", err)
			return
		}
	}
}
