package pubsubtest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasebus/leasebus/pubsub"
)

// The cases of this file check the delivery policy (pubsub.Policy) through
// the backend: every backend must apply it the same way.

// bothKinds runs run as a FanOut subtest and as a group subtest called
// group (skipped without Features.ConsumerGroups), whose opts carry
// pubsub.Group("g").
func (s *suite) bothKinds(t *testing.T, group string, run func(t *testing.T, opts ...pubsub.SubscribeOption)) {
	t.Run("FanOut", func(t *testing.T) { run(t) })
	t.Run(group, func(t *testing.T) {
		if !s.f.ConsumerGroups {
			t.Skip("pubsubtest: Features.ConsumerGroups is off")
		}
		run(t, pubsub.Group("g"))
	})
}

// checkDeadLetter checks that the dead letter d is event id after attempts
// attempts, with a reason holding reason.
func checkDeadLetter(t *testing.T, d pubsub.Event, id string, attempts int, reason string) {
	t.Helper()
	if d.ID != id || d.Metadata[pubsub.MetaDeadAttempts] != strconv.Itoa(attempts) {
		t.Errorf("dead letter ID %q attempts %q, want %q and %d", d.ID, d.Metadata[pubsub.MetaDeadAttempts], id, attempts)
	}
	if r := d.Metadata[pubsub.MetaDeadReason]; !strings.Contains(r, reason) {
		t.Errorf("dead letter reason %q, want one holding %q", r, reason)
	}
}

// A handler that panics on every attempt has the event dead-lettered after
// MaxDeliveries attempts, with the panic as the reason; the subscription
// keeps working.
func (s *suite) panicDeadLetters(t *testing.T) {
	s.bothKinds(t, "Group", func(t *testing.T, opts ...pubsub.SubscribeOption) {
		ps := s.backend(t)
		topic := topicFor(t)
		dead := newRecorder()
		s.subscribe(t, ps, pubsub.DeadLetterTopic(topic), dead.handler("dead"))
		rec := newRecorder()
		opts = append(opts, pubsub.MaxDeliveries(2), pubsub.RedeliveryDelay(time.Millisecond))
		s.subscribe(t, ps, topic, func(_ context.Context, e pubsub.Event) error {
			rec.add("m", e)
			if e.Type == "panics" {
				panic("pubsubtest: deliberate panic " + e.ID)
			}
			return nil
		}, opts...)
		s.publish(t, ps, topic, pubsub.Event{ID: "p1", Type: "panics"})
		checkDeadLetter(t, dead.waitN(t, s, 1)[0].e, "p1", 2, "deliberate panic p1")
		s.publish(t, ps, topic, pubsub.Event{Type: "next"})
		rec.waitType(t, s, "next")
	})
}

// A topic may hold any bytes, and so may a handler's error: an event of a
// topic that is not valid UTF-8 whose handler failed with an error that is
// not either is dead-lettered once, with MetaDeadTopic and MetaDeadReason
// holding the topic and the error with each invalid byte sequence replaced
// by U+FFFD (pubsub.DeadLetter), so that the dead letter is an
// event every backend accepts (event metadata must be valid UTF-8:
// pubsub.ValidateEvent).
func (s *suite) deadLetterOfAnyTopic(t *testing.T) {
	s.bothKinds(t, "Group", func(t *testing.T, opts ...pubsub.SubscribeOption) {
		ps := s.backend(t)
		topic := topicFor(t) + "\xff\xfe{x}"
		dead := newRecorder()
		s.subscribe(t, ps, pubsub.DeadLetterTopic(topic), dead.handler("dead"))
		var calls atomic.Int32
		opts = append(opts, pubsub.MaxDeliveries(1), pubsub.RedeliveryDelay(time.Millisecond))
		s.subscribe(t, ps, topic, func(_ context.Context, e pubsub.Event) error {
			calls.Add(1)
			return errors.New("bad \xff bytes")
		}, opts...)
		s.publish(t, ps, topic, pubsub.Event{ID: "b1", Type: "fails"})
		d := dead.waitN(t, s, 1)[0].e
		if got, want := d.Metadata[pubsub.MetaDeadTopic], strings.ToValidUTF8(topic, "\uFFFD"); got != want {
			t.Errorf("%s = %q, want %q", pubsub.MetaDeadTopic, got, want)
		}
		if got, want := d.Metadata[pubsub.MetaDeadReason], "bad \uFFFD bytes"; got != want {
			t.Errorf("%s = %q, want %q", pubsub.MetaDeadReason, got, want)
		}
		checkDeadLetter(t, d, "b1", 1, "bad")
		s.flush(t, ps)
		if n := calls.Load(); n != 1 {
			t.Errorf("handler called %d times, want 1", n)
		}
	})
}

// With MaxDeliveries(n), an event whose handler ends its goroutine
// (runtime.Goexit) on every attempt is dead-lettered once it was delivered
// n times, without a further call (Handle never returned from attempt n to
// dead-letter it then), and the subscription goes on.
func (s *suite) goexitDeadLetters(t *testing.T) {
	s.bothKinds(t, "Group", func(t *testing.T, opts ...pubsub.SubscribeOption) {
		ps := s.backend(t)
		topic := topicFor(t)
		dead := newRecorder()
		s.subscribe(t, ps, pubsub.DeadLetterTopic(topic), dead.handler("dead"))
		rec := newRecorder()
		opts = append(opts, pubsub.MaxDeliveries(2), pubsub.RedeliveryDelay(time.Millisecond))
		s.subscribe(t, ps, topic, func(_ context.Context, e pubsub.Event) error {
			rec.add("m", e)
			if e.Type == "exits" {
				runtime.Goexit()
			}
			return nil
		}, opts...)
		s.publish(t, ps, topic, pubsub.Event{ID: "x1", Type: "exits"})
		checkDeadLetter(t, dead.waitN(t, s, 1)[0].e, "x1", 2, "delivered 2 times without an ack")
		s.publish(t, ps, topic, pubsub.Event{Type: "next"})
		rec.waitType(t, s, "next")
		s.flush(t, ps)
		var got []string
		for _, d := range rec.all() {
			got = append(got, d.e.Type+"#"+strconv.Itoa(d.e.DeliveryAttempt))
		}
		if fmt.Sprint(got) != "[exits#1 exits#2 next#1]" {
			t.Errorf("handler calls %v, want [exits#1 exits#2 next#1]", got)
		}
	})
}

// An event delivered MaxDeliveries times and never acked (its handler ran
// past the AckDeadline) is dead-lettered on its next delivery without
// running a handler again.
func (s *suite) maxDeliveriesCountsUnacked(t *testing.T) {
	ps := s.backend(t)
	peer := s.peer(t, ps)
	topic := topicFor(t)
	dead := newRecorder()
	s.subscribe(t, ps, pubsub.DeadLetterTopic(topic), dead.handler("dead"))
	release := make(chan struct{})
	defer close(release)
	var (
		mu    sync.Mutex
		calls []string
	)
	h := func(member string) pubsub.Handler {
		return func(ctx context.Context, e pubsub.Event) error {
			mu.Lock()
			calls = append(calls, fmt.Sprintf("%s#%d", member, e.DeliveryAttempt))
			mu.Unlock()
			select { // never acks in time
			case <-release:
			case <-ctx.Done():
			}
			return ctx.Err()
		}
	}
	opts := []pubsub.SubscribeOption{pubsub.Group("g"), pubsub.AckDeadline(300 * time.Millisecond), pubsub.MaxDeliveries(1)}
	s.subscribe(t, ps, topic, h("a"), opts...)
	s.subscribe(t, peer, topic, h("b"), opts...)
	s.publish(t, ps, topic, pubsub.Event{ID: "stuck", Type: "stuck"})
	checkDeadLetter(t, dead.waitN(t, s, 1)[0].e, "stuck", 1, "without an ack")
	mu.Lock()
	defer mu.Unlock()
	if len(calls) != 1 {
		t.Errorf("handler calls %v, want exactly one (MaxDeliveries 1: the redelivery is dead-lettered, not run)", calls)
	}
}

// RedeliveryDelay(d) paces redeliveries of a nacked event: attempt n+1
// starts at least d·2ⁿ⁻¹ after attempt n failed.
func (s *suite) redeliveryDelayPaces(t *testing.T) {
	const d = 100 * time.Millisecond
	s.bothKinds(t, "Group", func(t *testing.T, opts ...pubsub.SubscribeOption) {
		ps := s.backend(t)
		topic := topicFor(t)
		var (
			mu     sync.Mutex
			failed = map[int]time.Time{} // attempt -> when its handler returned
			gaps   = map[int]time.Duration{}
		)
		rec := newRecorder()
		opts = append(opts, pubsub.RedeliveryDelay(d))
		s.subscribe(t, ps, topic, func(_ context.Context, e pubsub.Event) error {
			now := time.Now()
			mu.Lock()
			if at, ok := failed[e.DeliveryAttempt-1]; ok {
				gaps[e.DeliveryAttempt] = now.Sub(at)
			}
			mu.Unlock()
			rec.add("m", e)
			if e.DeliveryAttempt < 3 {
				mu.Lock()
				failed[e.DeliveryAttempt] = time.Now()
				mu.Unlock()
				return fmt.Errorf("attempt %d fails", e.DeliveryAttempt)
			}
			return nil
		}, opts...)
		s.publish(t, ps, topic, pubsub.Event{Type: "paced"})
		rec.waitFor(t, s, "attempt 3", func(ds []delivery) bool {
			return len(ds) > 0 && ds[len(ds)-1].e.DeliveryAttempt >= 3
		})
		mu.Lock()
		defer mu.Unlock()
		for attempt, min := range map[int]time.Duration{2: d, 3: 2 * d} {
			if gaps[attempt] < min {
				t.Errorf("attempt %d started %v after attempt %d failed, want at least %v (RedeliveryDelay %v)", attempt, gaps[attempt], attempt-1, min, d)
			}
		}
	})
}

// RedeliveryDelay(0) redelivers at once: an event that fails 25 times is
// acked on attempt 26 in well under half the time the default delays alone
// would take (about 19s).
func (s *suite) redeliveryDelayZero(t *testing.T) {
	const fails = 25
	var paced time.Duration
	for n := 1; n <= fails; n++ {
		paced += pubsub.RetryDelay(n)
	}
	s.bothKinds(t, "Group", func(t *testing.T, opts ...pubsub.SubscribeOption) {
		ps := s.backend(t)
		topic := topicFor(t)
		acked := make(chan struct{})
		opts = append(opts, pubsub.RedeliveryDelay(0))
		s.subscribe(t, ps, topic, func(_ context.Context, e pubsub.Event) error {
			if e.DeliveryAttempt <= fails {
				return fmt.Errorf("attempt %d fails", e.DeliveryAttempt)
			}
			close(acked)
			return nil
		}, opts...)
		start := time.Now()
		s.publish(t, ps, topic, pubsub.Event{Type: "fast"})
		select {
		case <-acked:
		case <-time.After(paced / 2):
			t.Fatalf("%d redeliveries with RedeliveryDelay(0) took over %v; the default delays alone take %v", fails, paced/2, paced)
		}
		t.Logf("%d redeliveries in %v (default delays: %v)", fails, time.Since(start).Round(time.Millisecond), paced)
	})
}
