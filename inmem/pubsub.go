package inmem

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasebus/leasebus/pubsub"
)

// Housekeeping of the in-memory topic logs (retention.go has the rest).
const (
	// sweepEvery is how often (by the Backend's Clock) Publish and Subscribe
	// look for idle groups and topics to forget.
	sweepEvery = time.Minute
	// deadlinePoll bounds the wait for an ack deadline when the Backend's
	// clock is not the system clock, since such a clock cannot wake anyone.
	deadlinePoll = 20 * time.Millisecond
)

// bus is the pubsub half of a Backend.
//
// Locks: bus.mu before topic.mu; progressMu is a leaf. Nothing is called
// with a topic lock held except code of this file that takes no other lock.
type bus struct {
	b *Backend

	mu        sync.Mutex
	closing   bool
	topics    map[string]*topic
	subs      map[*subscription]struct{}
	lastSweep time.Time
	// peakTopics and peakSubs are the most entries topics and subs have
	// held since their tables were made (sweep makes smaller ones).
	peakTopics, peakSubs int
	pubs                 sync.WaitGroup // publishes in flight
	closed               chan struct{}  // closed when close has finished

	progressMu sync.Mutex
	progress   chan struct{} // closed on progress, when someone waits
}

func (bus *bus) init(b *Backend) {
	bus.b = b
	bus.topics = make(map[string]*topic)
	bus.subs = make(map[*subscription]struct{})
	bus.closed = make(chan struct{})
	bus.lastSweep = b.clock.Now()
}

// close stops every subscription, waits for their handlers and forgets the
// topics. It runs once, as the drain of Backend.Shutdown.
func (bus *bus) close() {
	bus.mu.Lock()
	bus.closing = true
	bus.mu.Unlock()
	bus.pubs.Wait()

	bus.mu.Lock()
	subs := make([]*subscription, 0, len(bus.subs))
	for s := range bus.subs {
		subs = append(subs, s)
	}
	bus.mu.Unlock()
	for _, s := range subs {
		s.stop(true)
	}
	for _, s := range subs {
		<-s.done
	}
	bus.mu.Lock()
	bus.topics = make(map[string]*topic)
	bus.mu.Unlock()
	bus.progressed()
	close(bus.closed)
}

// progressChan returns a channel that is closed at the next progress: a
// delivery finished or a subscription stopped.
func (bus *bus) progressChan() <-chan struct{} {
	bus.progressMu.Lock()
	defer bus.progressMu.Unlock()
	if bus.progress == nil {
		bus.progress = make(chan struct{})
	}
	return bus.progress
}

func (bus *bus) progressed() {
	bus.progressMu.Lock()
	if bus.progress != nil {
		close(bus.progress)
		bus.progress = nil
	}
	bus.progressMu.Unlock()
}

// topic is the log of one topic and its readers.
type topic struct {
	name string

	mu          sync.Mutex
	events      []pubsub.Event // retained events; events[i] has sequence base+i
	base        uint64
	next        uint64    // sequence of the next event
	trimAt      int       // len(events) at which the next trim is tried
	lastPublish time.Time // of the last publish or subscribe, by the Backend's Clock
	lastStored  time.Time // of the last publish, by the Backend's Clock (GroupBacklog)
	fanouts     map[*reader]struct{}
	groups      map[string]*reader
}

// lockTopic returns the topic called name, created when missing, locked.
// bus.mu must be held; the caller unlocks bus.mu and then the topic.
func (bus *bus) lockTopic(name string) *topic {
	t := bus.topics[name]
	if t == nil {
		t = &topic{
			name:        name,
			trimAt:      bus.trimStep(),
			lastPublish: bus.b.clock.Now(),
			fanouts:     make(map[*reader]struct{}),
			groups:      make(map[string]*reader),
		}
		bus.topics[name] = t
		bus.peakTopics = max(bus.peakTopics, len(bus.topics))
	}
	t.mu.Lock()
	return t
}

// Publish stores e on topic and returns once it is in the topic's log, where
// every subscription in place sees it. It assigns e.ID (a random UUID) and
// e.CreatedAt (time.Now()) when they are empty and keeps its own copy of
// e.Data and e.Metadata. It returns an error wrapping pubsub.ErrInvalid for
// an empty topic or e.Type, pubsub.ErrClosed after Close, and ctx.Err() when
// ctx has ended. Publish never blocks on subscribers.
//
// The Backend keeps, per topic, the events some subscription or group has
// yet to read or ack plus at least the newest Options.Retention (100,000 by
// default), which is what StartFrom(Earliest) reads; a topic nobody
// subscribes to is forgotten after Options.TopicIdleTTL (ten minutes by
// default).
func (b *Backend) Publish(ctx context.Context, topic string, e pubsub.Event) error {
	return b.publishTo(ctx, topic, "", e)
}

// PublishFor publishes e to topic like Publish and, in the same step,
// creates group on topic if it does not exist, positioned at e, so that
// retention keeps e until the group acks it (pubsub.GroupPublisher).
func (b *Backend) PublishFor(ctx context.Context, topic, group string, e pubsub.Event) error {
	if group == "" {
		return fmt.Errorf("%w: group name is empty (PublishFor on topic %q)", pubsub.ErrInvalid, topic)
	}
	return b.publishTo(ctx, topic, group, e)
}

// PublishBatch publishes ps in order, each as Publish (PublishFor when its
// Group is set) does, after checking them all (pubsub.BatchPublisher):
// an invalid publication returns an error wrapping pubsub.ErrInvalid and
// nothing is published.
func (b *Backend) PublishBatch(ctx context.Context, ps []pubsub.Publication) error {
	if b.isClosed() {
		return pubsub.ErrClosed
	}
	if err := pubsub.ValidatePublications(ps); err != nil {
		return err
	}
	for i, p := range ps {
		if err := b.publishTo(ctx, p.Topic, p.Group, p.Event); err != nil {
			return fmt.Errorf("inmem: publication %d of %d: %w", i, len(ps), err)
		}
	}
	return nil
}

// publishTo is Publish, and PublishFor when group is set.
func (b *Backend) publishTo(ctx context.Context, topic, group string, e pubsub.Event) error {
	if b.isClosed() {
		return pubsub.ErrClosed
	}
	if err := pubsub.ValidateTopic(topic); err != nil {
		return err
	}
	e, err := pubsub.PrepareEvent(e)
	if err != nil {
		return fmt.Errorf("%w (topic %q)", err, topic)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	e.Data = bytes.Clone(e.Data)
	e.Metadata = maps.Clone(e.Metadata)
	return b.bus.publish(topic, group, e)
}

// publish appends a prepared event to the log of topic, first creating
// group (when set) at the event if it is missing.
func (bus *bus) publish(name, group string, e pubsub.Event) error {
	bus.mu.Lock()
	if bus.closing {
		bus.mu.Unlock()
		return pubsub.ErrClosed
	}
	bus.pubs.Add(1)
	defer bus.pubs.Done()
	now := bus.b.clock.Now()
	bus.sweep(now)
	t := bus.lockTopic(name)
	bus.mu.Unlock()

	if group != "" && t.groups[group] == nil {
		t.groups[group] = newReader(t, group, t.next)
	}
	t.events = append(t.events, e)
	t.next++
	t.lastPublish, t.lastStored = now, now
	if len(t.events) >= t.trimAt {
		t.trim(bus.b.opts.Retention, bus.trimStep())
	}
	for r := range t.fanouts {
		r.notify()
	}
	for _, r := range t.groups {
		r.notify()
	}
	t.mu.Unlock()
	return nil
}

// Subscribe starts delivering the events of topic to h as the options say
// (see package pubsub) and returns once the subscription is in place: with
// StartFrom(Latest) it receives every event published after Subscribe
// returned. Each subscription runs Concurrency(n) goroutines that hand it
// events; they exit when the subscription is unsubscribed or the Backend
// closes, after their running handler returned.
//
// Deliveries follow pubsub.Policy (panics nack, MaxDeliveries dead-letters).
// A fan-out subscription gets every event; a nacked one (handler error or
// panic) is redelivered to it after pubsub.RedeliveryDelay. A group keeps its
// position and its unacked events in the Backend while it has no members.
// A group delivery is redelivered to any live member after a nack (after the
// nacking member's RedeliveryDelay, or at once when that member unsubscribes
// first), when its member unsubscribes, as soon as that member's handler
// of it returns without an ack (not while it still runs), and to another
// member when it is not acked within its AckDeadline (read from the
// Backend's Clock); a late ack of the first attempt still counts. Each
// redelivery is the next attempt, counted towards MaxDeliveries.
// AckDeadline does not apply to fan-out subscriptions: the only possible
// receiver is the one running it.
// A member subscribing with pubsub.ClaimPending takes over, as it subscribes,
// every delivery of its group that another member holds unacked or that waits
// for its redelivery, and runs those first, in publish order, as redeliveries.
//
// It returns an error wrapping pubsub.ErrInvalid for bad input,
// pubsub.ErrClosed after Close, and ctx.Err() when ctx has ended.
func (b *Backend) Subscribe(ctx context.Context, topic string, h pubsub.Handler, opts ...pubsub.SubscribeOption) (pubsub.Subscription, error) {
	if b.isClosed() {
		return nil, pubsub.ErrClosed
	}
	cfg, err := pubsub.PrepareSubscribe(topic, h, opts...)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return b.bus.subscribe(topic, pubsub.NewPolicy(topic, h, cfg, b.Publish), cfg)
}

func (bus *bus) subscribe(name string, p *pubsub.Policy, cfg pubsub.SubscribeConfig) (*subscription, error) {
	bus.mu.Lock()
	defer bus.mu.Unlock()
	if bus.closing {
		return nil, pubsub.ErrClosed
	}
	now := bus.b.clock.Now()
	bus.sweep(now)
	t := bus.lockTopic(name)
	defer t.mu.Unlock()
	t.lastPublish = now

	start := t.next
	if cfg.StartFrom == pubsub.Earliest {
		start = t.base
	}
	var r *reader
	if cfg.Group != "" {
		r = t.groups[cfg.Group]
		if r == nil {
			r = newReader(t, cfg.Group, start)
			t.groups[cfg.Group] = r
		}
	} else {
		r = newReader(t, "", start)
		t.fanouts[r] = struct{}{}
	}
	s := &subscription{
		bus:  bus,
		r:    r,
		p:    p,
		cfg:  cfg,
		done: make(chan struct{}),
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if cfg.ClaimPending {
		s.claim()
	}
	r.members = append(r.members, s)
	bus.subs[s] = struct{}{}
	bus.peakSubs = max(bus.peakSubs, len(bus.subs))
	s.live.Store(int32(cfg.Concurrency))
	for range cfg.Concurrency {
		go s.work()
	}
	return s, nil
}

// claim takes over, for a new ClaimPending member s, every delivery of its
// group that is pending on another member or waiting for its redelivery, in
// publish order. The members still running one of them may ack it too (that
// counts); their failures no longer count. t.mu must be held.
func (s *subscription) claim() {
	r := s.r
	for it := range r.pending {
		if it.done || it.claimed {
			continue
		}
		delete(r.pending, it)
		it.claimed = true
		s.claims = append(s.claims, it)
	}
	kept := r.retries[:0]
	for _, it := range r.retries {
		if it.done {
			kept = append(kept, it)
			continue
		}
		it.queued = false
		it.claimed = true
		s.claims = append(s.claims, it)
	}
	clear(r.retries[len(kept):])
	r.retries = kept
	// What an earlier claimer has not started yet is the newest claimer's
	// too: it is the one legitimate consumer now.
	for _, m := range r.members {
		for _, it := range m.claims {
			if !it.done {
				s.claims = append(s.claims, it)
			}
		}
		m.claims = nil
	}
	slices.SortFunc(s.claims, func(a, b *item) int { return cmp.Compare(a.seq, b.seq) })
}

// Flush waits until every event published before Flush was called has been
// handed to the handlers of the current subscriptions (for a group, to one of
// its members; groups without members are skipped) and no handler is still
// running for it. A nacked event that waits for its redelivery does not hold
// Flush up. It returns ctx.Err() when ctx ends first and pubsub.ErrClosed
// after Close (also when Close happens while it waits).
func (b *Backend) Flush(ctx context.Context) error {
	if b.isClosed() {
		return pubsub.ErrClosed
	}
	type mark struct {
		t    *topic
		next uint64
	}
	bus := &b.bus
	bus.mu.Lock()
	if bus.closing {
		bus.mu.Unlock()
		return pubsub.ErrClosed
	}
	marks := make([]mark, 0, len(bus.topics))
	for _, t := range bus.topics {
		t.mu.Lock()
		marks = append(marks, mark{t, t.next})
		t.mu.Unlock()
	}
	bus.mu.Unlock()

	for {
		progress := bus.progressChan()
		for len(marks) > 0 && marks[0].t.flushed(marks[0].next) {
			marks = marks[1:]
		}
		if len(marks) == 0 {
			return nil
		}
		select {
		case <-progress:
		case <-bus.closed:
			return pubsub.ErrClosed
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// flushed reports whether every event before next was handed to every reader
// with members, and none of them runs any more.
func (t *topic) flushed(next uint64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for r := range t.fanouts {
		if !r.flushed(next) {
			return false
		}
	}
	for _, r := range t.groups {
		if len(r.members) > 0 && !r.flushed(next) {
			return false
		}
	}
	return true
}

// reader is a position in a topic with its redeliveries: the private reader
// of a fan-out subscription, or a group shared by its members. Its fields are
// guarded by t.mu.
type reader struct {
	t       *topic
	group   string // "" for fan-out
	cursor  uint64 // sequence of the next event to hand out
	members []*subscription
	retries []*item            // redeliveries, due at their readyAt
	pending map[*item]struct{} // group attempts in flight, with deadlines
	running map[uint64]int     // attempts in flight, by sequence
	wake    chan struct{}      // closed on news, when a worker waits
	// idleSince is when the last member left, by the Backend's Clock (zero
	// while it never had one).
	idleSince time.Time
	// forgotten is the topic's next sequence at its latest DeleteTopic: an
	// attempt of an older event that is still in flight then is not
	// delivered again when it fails (forgetPast).
	forgotten uint64
}

func newReader(t *topic, group string, cursor uint64) *reader {
	return &reader{
		t:       t,
		group:   group,
		cursor:  cursor,
		pending: make(map[*item]struct{}),
		running: make(map[uint64]int),
	}
}

func (r *reader) notify() {
	if r.wake != nil {
		close(r.wake)
		r.wake = nil
	}
}

func (r *reader) flushed(next uint64) bool {
	if r.cursor < next {
		return false
	}
	for seq := range r.running {
		if seq < next {
			return false
		}
	}
	return true
}

func (r *reader) removeRetry(it *item) {
	for i, x := range r.retries {
		if x == it {
			r.retries = append(r.retries[:i], r.retries[i+1:]...)
			return
		}
	}
}

func (r *reader) queue(it *item, at time.Time) {
	it.queued = true
	it.nackedBy = nil
	it.readyAt = at
	r.retries = append(r.retries, it)
	r.notify()
}

func (r *reader) start(seq uint64) { r.running[seq]++ }

func (r *reader) finish(seq uint64) {
	if r.running[seq] <= 1 {
		delete(r.running, seq)
	} else {
		r.running[seq]--
	}
}

// item is one event of a reader and the state of its deliveries. Its fields
// are guarded by t.mu, except ev, which never changes.
type item struct {
	seq      uint64
	ev       pubsub.Event
	attempts int // deliveries made
	readyAt  time.Time
	deadline time.Time       // of the newest group attempt, by the Backend's clock
	holders  []*subscription // subscriptions running an attempt
	// nackedBy is the group member whose failed attempt set readyAt (nil
	// once it is delivered again, or for any other queueing): when that
	// member stops before readyAt, the event is due at once.
	nackedBy *subscription
	queued   bool // in reader.retries
	claimed  bool // in a ClaimPending member's claims
	done     bool // acked (or dead-lettered by the policy)
}

func (it *item) heldBy(s *subscription) bool {
	for _, h := range it.holders {
		if h == s {
			return true
		}
	}
	return false
}

func (it *item) release(s *subscription) {
	for i, h := range it.holders {
		if h == s {
			it.holders = append(it.holders[:i], it.holders[i+1:]...)
			return
		}
	}
}

// job is what a worker does next: run the handler for attempt of it.
type job struct {
	it      *item
	attempt int
}

// subscription is a pubsub.Subscription of the Backend.
type subscription struct {
	bus *bus
	r   *reader
	p   *pubsub.Policy
	cfg pubsub.SubscribeConfig

	ctx    context.Context // handlers' ctx; cancelled by stop
	cancel context.CancelFunc

	// claims are the deliveries s took over from other members when it
	// subscribed with ClaimPending, in publish order; it runs them before
	// anything else. Guarded by t.mu.
	claims []*item

	stopOnce sync.Once
	byClose  bool         // the Backend's Close stopped it; set in stopOnce
	live     atomic.Int32 // workers still running
	done     chan struct{}
}

// Topic returns the subscribed topic.
func (s *subscription) Topic() string { return s.r.t.name }

// Unsubscribe stops deliveries, cancels the ctx of running handlers and
// returns after they have returned and the subscription's goroutines have
// exited, or ctx.Err() when ctx ends first (the handlers keep running then;
// call Unsubscribe again to wait for them). Group events it had not acked go
// back to the group as their handlers return (one whose handler runs on
// past its AckDeadline goes to another member then); one a worker took as
// Unsubscribe began goes back without running, as the same attempt. It is idempotent; after the Backend closed it
// returns pubsub.ErrClosed, once the handlers have returned.
func (s *subscription) Unsubscribe(ctx context.Context) error {
	s.stop(false)
	select {
	case <-s.done:
	case <-ctx.Done():
		select {
		case <-s.done: // stopped already: the same answer whatever ctx
		default:
			return ctx.Err()
		}
	}
	if s.byClose {
		return pubsub.ErrClosed
	}
	return nil
}

// stop ends deliveries to s; its workers exit once their handler returns.
func (s *subscription) stop(byClose bool) {
	s.stopOnce.Do(func() {
		s.byClose = byClose
		s.cancel()
		r, t := s.r, s.r.t
		t.mu.Lock()
		for i, m := range r.members {
			if m == s {
				r.members = append(r.members[:i], r.members[i+1:]...)
				break
			}
		}
		if len(r.members) == 0 {
			r.idleSince = s.bus.b.clock.Now()
		}
		if r.group == "" {
			delete(t.fanouts, r)
		} else {
			now := time.Now()
			// Deliveries s is still running go back to the group when
			// their handler returns without an ack (settle), not before
			// (package pubsub, "Groups": once its handlers have
			// returned); one whose handler never returns is taken over
			// at its AckDeadline, like a dead member's.
			// Events s nacked wait out the redelivery delay of s's
			// policy: with s gone they are due at once, for the other
			// members or the next one (as the next attempt).
			for _, it := range r.retries {
				if it.nackedBy == s {
					it.nackedBy = nil
					if it.readyAt.After(now) {
						it.readyAt = now
					}
				}
			}
			r.notify()
			// Claimed deliveries s never started go back to the group.
			for _, it := range s.claims {
				it.claimed = false
				if !it.done {
					r.queue(it, now)
				}
			}
			s.claims = nil
		}
		t.mu.Unlock()
		s.bus.progressed()
	})
}

// work hands events to the handler until the subscription stops.
func (s *subscription) work() {
	for {
		j, ok := s.next()
		if !ok {
			s.exit()
			return
		}
		if h := testHookTaken.Load(); h != nil {
			(*h)(s)
		}
		if s.ctx.Err() != nil {
			// Taken just as the subscription stopped: never started, so
			// no attempt, as redisstreams hands back the entries it read
			// and did not start with their count undone
			// (TestJobTakenAsStopIsNotAnAttempt: with MaxDeliveries(1)
			// the next member dead-lettered it without a run).
			s.unstart(j)
			s.exit()
			return
		}
		s.run(j)
	}
}

// run runs the delivery j and settles it. A handler that ends its goroutine
// instead of returning (runtime.Goexit, as testing's FailNow does) ends
// this worker's: j is settled as a failure (pubsub.ErrHandlerExited) and a
// new worker takes this one's place, so that the event is redelivered and
// the subscription keeps its Concurrency (pubsubtest's GoexitRedelivers).
func (s *subscription) run(j job) {
	returned := false
	defer func() {
		if !returned {
			s.settle(j, pubsub.ErrHandlerExited)
			go s.work()
		}
	}()
	err := s.invoke(j)
	returned = true
	s.settle(j, err)
}

// testHookTaken, when set (tests only, before any subscription), runs in a
// worker of s after it took a job and before it looks at its ctx.
var testHookTaken atomic.Pointer[func(s *subscription)]

// unstart undoes the delivery j that s took and will not start: a group's
// event goes back to the group at once as the same attempt, unless another
// attempt took it over or it was acked meanwhile.
func (s *subscription) unstart(j job) {
	it := j.it
	r, t := s.r, s.r.t
	t.mu.Lock()
	it.release(s)
	r.finish(it.seq)
	if r.group != "" && !it.done && !it.queued && !it.claimed && it.attempts == j.attempt {
		it.attempts--
		delete(r.pending, it)
		r.queue(it, time.Now())
	}
	t.mu.Unlock()
	s.bus.progressed()
}

// exit is run by each worker on its way out; the last one closes done.
func (s *subscription) exit() {
	if s.live.Add(-1) > 0 {
		return
	}
	s.bus.mu.Lock()
	delete(s.bus.subs, s)
	s.bus.mu.Unlock()
	close(s.done)
}

// next blocks until there is a job for s, or s stops (false).
func (s *subscription) next() (job, bool) {
	r, t := s.r, s.r.t
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		t.mu.Lock()
		if s.ctx.Err() != nil {
			t.mu.Unlock()
			return job{}, false
		}
		j, wait, ok := s.take()
		if ok {
			t.mu.Unlock()
			return j, true
		}
		if r.wake == nil {
			r.wake = make(chan struct{})
		}
		wake := r.wake
		t.mu.Unlock()

		var tick <-chan time.Time
		if wait > 0 {
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			tick = timer.C
		}
		select {
		case <-wake:
		case <-tick:
		case <-s.ctx.Done():
			return job{}, false
		}
	}
}

// take returns the next job for s, or how long to wait before one may be due
// (0: until notified). t.mu must be held.
func (s *subscription) take() (j job, wait time.Duration, ok bool) {
	r, t := s.r, s.r.t
	now := time.Now()
	var cnow time.Time
	group := r.group != ""
	if group {
		cnow = s.bus.b.clock.Now()
		for it := range r.pending {
			if cnow.Before(it.deadline) {
				continue
			}
			// The attempt ran out of time: a member that is still alive
			// may take it over (the policy dead-letters it when it was
			// delivered MaxDeliveries times already).
			delete(r.pending, it)
			r.queue(it, now)
		}
	}

	// Deliveries taken over by a ClaimPending member: before anything else,
	// in publish order.
	for len(s.claims) > 0 {
		it := s.claims[0]
		s.claims[0] = nil
		s.claims = s.claims[1:]
		it.claimed = false
		if it.done {
			continue // its first member acked it meanwhile
		}
		return s.deliver(it, cnow), 0, true
	}

	// Redeliveries next, the longest due first.
	var pick *item
	pickAt := -1
	for i, it := range r.retries {
		if it.heldBy(s) {
			continue // s is still running an attempt of it
		}
		if it.readyAt.After(now) {
			if d := it.readyAt.Sub(now); wait == 0 || d < wait {
				wait = d
			}
			continue
		}
		if pick == nil || it.readyAt.Before(pick.readyAt) {
			pick, pickAt = it, i
		}
	}
	if pick != nil {
		r.retries = append(r.retries[:pickAt], r.retries[pickAt+1:]...)
		pick.queued = false
		return s.deliver(pick, cnow), 0, true
	}

	if r.cursor < t.next {
		if r.cursor < t.base {
			r.cursor = t.base // not reached: trim keeps what readers need
		}
		it := &item{seq: r.cursor, ev: t.events[r.cursor-t.base]}
		r.cursor++
		return s.deliver(it, cnow), 0, true
	}

	if group && len(r.pending) > 0 {
		var first time.Time
		for it := range r.pending {
			if first.IsZero() || it.deadline.Before(first) {
				first = it.deadline
			}
		}
		d := max(first.Sub(cnow), time.Millisecond)
		if _, sys := s.bus.b.clock.(systemClock); !sys {
			d = min(d, deadlinePoll)
		}
		if wait == 0 || d < wait {
			wait = d
		}
	}
	return job{}, wait, false
}

// deliver records a new attempt of it by s. t.mu must be held.
func (s *subscription) deliver(it *item, cnow time.Time) job {
	r := s.r
	it.attempts++
	it.nackedBy = nil
	it.holders = append(it.holders, s)
	r.start(it.seq)
	if r.group != "" {
		it.deadline = cnow.Add(s.cfg.AckDeadline)
		r.pending[it] = struct{}{}
	}
	return job{it: it, attempt: it.attempts}
}

// invoke runs the delivery policy for j with its own copy of the event.
func (s *subscription) invoke(j job) error {
	e := j.it.ev
	e.Data = bytes.Clone(e.Data)
	e.Metadata = maps.Clone(e.Metadata)
	e.DeliveryAttempt = j.attempt
	return s.p.Handle(s.ctx, e)
}

// settle records the outcome of attempt j by s.
func (s *subscription) settle(j job, err error) {
	it := j.it
	r, t := s.r, s.r.t
	t.mu.Lock()
	it.release(s)
	r.finish(it.seq)
	switch {
	case it.done:
		// Another attempt acked it already.
	case it.seq < r.forgotten:
		// DeleteTopic removed it while this attempt ran (a fan-out
		// delivery in flight is pending nowhere for forgetPast to mark).
		it.done = true
		delete(r.pending, it)
	case err == nil:
		it.done = true
		delete(r.pending, it)
		if it.queued {
			it.queued = false
			r.removeRetry(it)
		}
	case it.queued || it.claimed || (len(it.holders) > 0 && it.attempts > j.attempt):
		// A newer attempt has taken over; this failure is superseded.
		// An older one still running (its handler hung past its
		// AckDeadline, or its delivery was claimed) does not make the
		// newest attempt's failure wait for an ack deadline: it is
		// redelivered after the RedeliveryDelay, as any nack.
	case s.ctx.Err() != nil && r.group == "":
		// The fan-out subscription is going away, and its events with it.
	case s.ctx.Err() != nil:
		// Unsubscribed: back to the group at once.
		delete(r.pending, it)
		r.queue(it, time.Now())
	default:
		delete(r.pending, it)
		r.queue(it, time.Now().Add(s.p.RedeliveryDelay(it.attempts)))
		if r.group != "" {
			it.nackedBy = s
		}
	}
	if len(r.retries) > 0 {
		r.notify()
	}
	t.mu.Unlock()
	s.bus.progressed()
}
