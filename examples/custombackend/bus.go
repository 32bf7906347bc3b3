package main

import (
	"context"
	"maps"
	"sync"
	"time"

	"github.com/leasebus/leasebus/pubsub"
)

// ChanBus is an in-process pubsub.PubSub built from a log per topic, one
// mutex and channels that wake the subscription goroutines. Fan-out
// subscriptions and consumer groups are both queues over the topic log: a
// fan-out subscription owns its queue, the members of a group share one
// (which outlives them, so a group keeps its checkpoint). It keeps every
// event in memory for as long as the bus lives: an example, not a product.
type ChanBus struct {
	mu        sync.Mutex
	closed    bool
	closeDone chan struct{}
	logs      map[string][]pubsub.Event // topic -> events in publish order
	groups    map[groupKey]*queue
	subs      map[*chanSub]struct{}
	changed   chan struct{} // closed and replaced on every change of state
}

type groupKey struct{ topic, group string }

// queue hands the events of one topic log out to its subscriptions.
type queue struct {
	topic   string
	next    int            // index of the next log entry never handed out
	pending map[int]*entry // handed out and not acked yet
}

// settledLocked reports whether q handed out all n events of its log and no
// handler has one. Call with the bus's mu held.
func (q *queue) settledLocked(n int) bool {
	if q.next < n {
		return false
	}
	for _, e := range q.pending {
		if e.inFlight {
			return false
		}
	}
	return true
}

// entry is one event handed out and not acked yet.
type entry struct {
	attempts int       // deliveries made
	inFlight bool      // a handler has it
	holder   *chanSub  // when inFlight: the subscription whose handler has it
	deadline time.Time // when inFlight: redeliver after this
	readyAt  time.Time // when !inFlight: retry after this
	// nackedBy is the subscription whose nack set readyAt: when it stops
	// first, the entry is due at once (the delay was its policy's).
	nackedBy *chanSub
}

var _ pubsub.PubSub = (*ChanBus)(nil)

// NewChanBus returns an empty ChanBus.
func NewChanBus() *ChanBus {
	return &ChanBus{
		closeDone: make(chan struct{}),
		logs:      map[string][]pubsub.Event{},
		groups:    map[groupKey]*queue{},
		subs:      map[*chanSub]struct{}{},
		changed:   make(chan struct{}),
	}
}

// broadcast wakes every goroutine waiting for a change. Call with mu held.
func (b *ChanBus) broadcast() {
	close(b.changed)
	b.changed = make(chan struct{})
}

// Publish appends e to topic's log and wakes the subscriptions.
func (b *ChanBus) Publish(ctx context.Context, topic string, e pubsub.Event) error {
	if err := pubsub.ValidateTopic(topic); err != nil {
		return err
	}
	e, err := pubsub.PrepareEvent(e)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return pubsub.ErrClosed
	}
	b.logs[topic] = append(b.logs[topic], clone(e))
	b.broadcast()
	return nil
}

// clone returns a copy of e that shares no memory with it, so that neither
// publishers nor handlers can change what the log holds.
func clone(e pubsub.Event) pubsub.Event {
	e.Data = append([]byte(nil), e.Data...)
	if len(e.Data) == 0 {
		e.Data = nil
	}
	e.Metadata = maps.Clone(e.Metadata)
	return e
}

// Subscribe starts cfg.Concurrency goroutines that deliver topic's events
// to h until Unsubscribe or Close. The delivery policy (panics nack,
// MaxDeliveries dead-letters, redelivery delay) is pubsub.Policy's: the bus
// only hands events out, acks and redelivers.
func (b *ChanBus) Subscribe(ctx context.Context, topic string, h pubsub.Handler, opts ...pubsub.SubscribeOption) (pubsub.Subscription, error) {
	cfg, err := pubsub.PrepareSubscribe(topic, h, opts...)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, pubsub.ErrClosed
	}
	start := len(b.logs[topic])
	if cfg.StartFrom == pubsub.Earliest {
		start = 0
	}
	var q *queue
	if cfg.Group == "" {
		q = &queue{topic: topic, next: start, pending: map[int]*entry{}}
	} else {
		k := groupKey{topic, cfg.Group}
		if q = b.groups[k]; q == nil {
			q = &queue{topic: topic, next: start, pending: map[int]*entry{}}
			b.groups[k] = q
		}
		if cfg.ClaimPending {
			// Take over what the other members hold: due at once, and
			// nextLocked hands out due entries oldest first, before new events.
			for _, e := range q.pending {
				e.inFlight, e.readyAt = false, time.Time{}
			}
		}
	}
	sctx, cancel := context.WithCancel(context.Background())
	p := pubsub.NewPolicy(topic, h, cfg, b.Publish)
	s := &chanSub{bus: b, topic: topic, p: p, cfg: cfg, q: q, ctx: sctx, cancel: cancel, done: make(chan struct{})}
	b.subs[s] = struct{}{}
	s.wg.Add(cfg.Concurrency)
	for range cfg.Concurrency {
		go s.work()
	}
	go func() { s.wg.Wait(); close(s.done) }()
	return s, nil
}

// Flush waits until every live subscription's queue has handed out every
// event of its topic and no handler is running one.
func (b *ChanBus) Flush(ctx context.Context) error {
	for {
		b.mu.Lock()
		if b.closed {
			b.mu.Unlock()
			return pubsub.ErrClosed
		}
		idle := true
		for s := range b.subs {
			if !s.q.settledLocked(len(b.logs[s.topic])) {
				idle = false
				break
			}
		}
		ch := b.changed
		b.mu.Unlock()
		if idle {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Close stops every subscription, waiting for running handlers. It is
// idempotent; every caller returns after the first one finished.
func (b *ChanBus) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		<-b.closeDone
		return nil
	}
	b.closed = true
	subs := make([]*chanSub, 0, len(b.subs))
	for s := range b.subs {
		subs = append(subs, s)
	}
	b.mu.Unlock()
	for _, s := range subs {
		s.stop(true)
		<-s.done
	}
	close(b.closeDone)
	return nil
}

// chanSub is one subscription.
type chanSub struct {
	bus    *ChanBus
	topic  string
	p      *pubsub.Policy
	cfg    pubsub.SubscribeConfig
	q      *queue
	ctx    context.Context // cancelled by stop: handlers see it
	cancel context.CancelFunc
	wg     sync.WaitGroup
	done   chan struct{} // closed when every goroutine of the subscription exited

	stopped bool // guarded by bus.mu
	byClose bool // Close stopped it first; guarded by bus.mu
}

// Topic returns the subscribed topic.
func (s *chanSub) Topic() string { return s.topic }

// Unsubscribe stops the subscription and waits for its handlers. After
// the bus's Close stopped it, it returns pubsub.ErrClosed, whatever ctx
// (pubsubtest checks both).
func (s *chanSub) Unsubscribe(ctx context.Context) error {
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
	b := s.bus
	b.mu.Lock()
	defer b.mu.Unlock()
	if s.byClose {
		return pubsub.ErrClosed
	}
	return nil
}

// stop ends the subscription; byClose says the bus's Close calls it.
func (s *chanSub) stop(byClose bool) {
	b := s.bus
	b.mu.Lock()
	if !s.stopped {
		s.stopped, s.byClose = true, byClose
		delete(b.subs, s)
		// What it nacked and was waiting to redeliver goes back to the
		// other members (or the next one) at once, as the next attempt.
		now := time.Now()
		for _, e := range s.q.pending {
			if !e.inFlight && e.nackedBy == s {
				e.nackedBy = nil
				e.readyAt = now
			}
		}
		b.broadcast()
	}
	b.mu.Unlock()
	s.cancel()
}

// work is one delivery goroutine; it exits when the subscription stops.
func (s *chanSub) work() {
	defer s.wg.Done()
	b := s.bus
	for {
		b.mu.Lock()
		if s.stopped {
			b.mu.Unlock()
			return
		}
		idx, ev, attempt, wake, ok := s.nextLocked(time.Now())
		ch := b.changed
		b.mu.Unlock()
		if !ok {
			s.sleep(ch, wake)
			continue
		}
		s.run(idx, attempt, ev)
	}
}

// run delivers ev and settles it. A handler that ends its goroutine
// (runtime.Goexit, as testing's FailNow does) never returns from Handle:
// the attempt is settled as failed, so the event is redelivered, and a new
// goroutine takes this one's place (pubsubtest's GoexitRedelivers).
func (s *chanSub) run(idx, attempt int, ev pubsub.Event) {
	b := s.bus
	err, returned := pubsub.ErrHandlerExited, false
	defer func() {
		b.mu.Lock()
		s.settleLocked(idx, attempt, err)
		b.mu.Unlock()
		if !returned {
			s.wg.Add(1) // before this goroutine's Done
			go s.work()
		}
	}()
	err = s.p.Handle(s.ctx, ev)
	returned = true
}

// sleep waits for a change, the wake time (if any) or the end of the
// subscription.
func (s *chanSub) sleep(ch <-chan struct{}, wake time.Time) {
	var timeout <-chan time.Time
	if !wake.IsZero() {
		t := time.NewTimer(time.Until(wake))
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-ch:
	case <-timeout:
	case <-s.ctx.Done():
	}
}

// nextLocked picks the next delivery: the oldest pending entry that is due
// (retry time or ack deadline passed), else the next new event. When nothing
// is due it returns the earliest time something will be.
func (s *chanSub) nextLocked(now time.Time) (idx int, ev pubsub.Event, attempt int, wake time.Time, ok bool) {
	q := s.q
	idx = -1
	for i, e := range q.pending {
		if e.inFlight && e.holder == s {
			continue // its handler is still running here: only another member may take it over
		}
		due := e.readyAt
		if e.inFlight {
			due = e.deadline
		}
		if !due.After(now) {
			if idx < 0 || i < idx {
				idx = i
			}
		} else if wake.IsZero() || due.Before(wake) {
			wake = due
		}
	}
	if idx < 0 {
		if q.next >= len(s.bus.logs[q.topic]) {
			return 0, pubsub.Event{}, 0, wake, false
		}
		idx = q.next
		q.next++
		q.pending[idx] = &entry{}
		s.bus.broadcast() // Flush watches next
	}
	e := q.pending[idx]
	e.attempts++
	e.inFlight, e.holder, e.nackedBy = true, s, nil
	e.deadline = now.Add(s.cfg.AckDeadline)
	ev = clone(s.bus.logs[q.topic][idx])
	ev.DeliveryAttempt = e.attempts
	return idx, ev, e.attempts, time.Time{}, true
}

// settleLocked records the outcome of delivery attempt of entry idx. An ack
// from any attempt removes the entry; a nack from an attempt that was
// overtaken by a redelivery is ignored; any other nack makes the entry due
// again after the policy's redelivery delay, or at once when the
// subscription has stopped (its handler failed as it stopped).
func (s *chanSub) settleLocked(idx, attempt int, err error) {
	q := s.q
	e := q.pending[idx]
	if e == nil {
		return
	}
	if err == nil {
		delete(q.pending, idx)
		s.bus.broadcast()
		return
	}
	if e.attempts != attempt {
		return
	}
	e.inFlight = false
	if s.stopped {
		e.readyAt = time.Now()
	} else {
		e.readyAt = time.Now().Add(s.p.RedeliveryDelay(e.attempts))
		e.nackedBy = s
	}
	s.bus.broadcast()
}
