package pubsub

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime/debug"
	"strconv"
	"strings"
	"time"
)

// DeadLetterTimeout bounds the publish of one dead letter by a [Policy]. The
// publish does not end with the subscription, so that a dead letter started
// before Unsubscribe or Close is finished.
const DeadLetterTimeout = 30 * time.Second

// PublishFunc stores an event on a topic, as [Publisher.Publish] does. A
// [Policy] publishes dead letters through it.
type PublishFunc func(ctx context.Context, topic string, e Event) error

// Policy is the delivery policy of one subscription: what every backend does
// around a handler call, written once so that a backend only moves events
// (reads them, sets DeliveryAttempt, acks, redelivers, claims). A backend
// makes one Policy per Subscribe with [NewPolicy], calls [Policy.Handle]
// instead of the user's handler, acks when it returns nil and, when it
// returns an error, redelivers the event after [Policy.RedeliveryDelay]
// (unless the subscription is going away). The rules:
//
//   - A panic of the handler is recovered and becomes an error: a nack.
//   - A handler that ends its goroutine instead of returning
//     (runtime.Goexit) ends Handle's too: Handle never returns. The backend
//     notices it (a deferred check of a flag set after Handle returned),
//     settles the attempt as failed with [ErrHandlerExited] and goes on on
//     a new goroutine; pubsubtest's GoexitRedelivers checks it. With
//     MaxDeliveries(n), such an attempt n is dead-lettered at the next
//     delivery, without a call ("delivered n times without an ack").
//   - With MaxDeliveries(n): a failed attempt n (or later) publishes the
//     event to DeadLetterTopic(topic), with [DeadLetter]'s metadata and the
//     handler's error as the reason, and Handle returns nil, so the backend
//     acks it on the original topic. An attempt above n (the event was
//     delivered n times and never acked: its handlers died or ran past their
//     AckDeadline) is dead-lettered without calling the handler.
//   - A failed attempt whose ctx has ended (Unsubscribe, Close) is never
//     dead-lettered: it is the backend's to hand back.
//   - A dead letter that cannot be published makes Handle return an error
//     (the event stays, and is redelivered), never drop the event.
//
// A Policy is safe for concurrent use.
type Policy struct {
	topic   string
	h       Handler
	max     int
	delay   time.Duration
	limit   time.Duration
	publish PublishFunc
}

// NewPolicy returns the policy of a subscription to topic with handler h and
// the configuration cfg (from [PrepareSubscribe]). publish stores dead
// letters; it is called with a ctx bounded by [DeadLetterTimeout] that the
// end of the subscription does not cancel. A backend usually passes its own
// Publish.
func NewPolicy(topic string, h Handler, cfg SubscribeConfig, publish PublishFunc) *Policy {
	limit := cfg.RedeliveryCap
	if limit <= 0 {
		limit = MaxRedeliveryDelay
	}
	return &Policy{topic: topic, h: h, max: cfg.MaxDeliveries, delay: cfg.RedeliveryDelay, limit: limit, publish: publish}
}

// Topic returns the subscribed topic.
func (p *Policy) Topic() string { return p.topic }

// Handle runs one delivery of e, whose DeliveryAttempt the backend has set
// (1 on the first delivery), with the rules of [Policy]. nil means ack; an
// error means nack.
func (p *Policy) Handle(ctx context.Context, e Event) error {
	if p.max > 0 && e.DeliveryAttempt > p.max {
		reason := fmt.Sprintf("delivered %d times without an ack", e.DeliveryAttempt-1)
		return p.deadLetter(ctx, DeadLetter(e, p.topic, reason, e.DeliveryAttempt-1))
	}
	last := p.max > 0 && e.DeliveryAttempt >= p.max
	he := e
	if last {
		// A failure is dead-lettered: the dead letter carries the event
		// as delivered, not what the handler changed in its copy's Data
		// or Metadata (TestDeadLetterCarriesTheEventAsDelivered in redisstreams).
		he.Data = bytes.Clone(e.Data)
		he.Metadata = maps.Clone(e.Metadata)
	}
	err := call(ctx, p.h, he)
	if err == nil || ctx.Err() != nil {
		return err
	}
	if last {
		if derr := p.deadLetter(ctx, DeadLetter(e, p.topic, err.Error(), e.DeliveryAttempt)); derr != nil {
			return errors.Join(err, derr)
		}
		return nil
	}
	return err
}

// RedeliveryDelay returns how long the backend waits before it delivers
// again an event whose attempt (from 1) failed: the RedeliveryDelay option
// (default DefaultRedeliveryDelay) doubled per earlier attempt, at most
// the RedeliveryCap option (default MaxRedeliveryDelay) or RedeliveryDelay,
// whichever is longer.
func (p *Policy) RedeliveryDelay(attempt int) time.Duration {
	return cappedDelay(p.delay, p.limit, attempt)
}

// deadLetter publishes d to the dead-letter topic.
func (p *Policy) deadLetter(ctx context.Context, d Event) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), DeadLetterTimeout)
	defer cancel()
	dead := DeadLetterTopic(p.topic)
	if err := p.publish(ctx, dead, d); err != nil {
		return fmt.Errorf("pubsub: dead-letter event %q of topic %q to %q: %w", d.ID, p.topic, dead, err)
	}
	return nil
}

// call runs h, turning a panic into an error that carries the stack.
func call(ctx context.Context, h Handler, e Event) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("pubsub: handler panicked: %v\n%s", r, debug.Stack())
		}
	}()
	return h(ctx, e)
}

// DeadLetter returns the dead letter of e, which failed on topic after
// attempts attempts, the last one with reason: a copy of e with
// DeliveryAttempt 0 and, besides its own metadata (copied), MetaDeadTopic,
// MetaDeadReason and MetaDeadAttempts. Data is shared with e. Metadata must
// be valid UTF-8 (ValidateEvent), while a topic and an error may hold any
// bytes: each byte sequence that is not valid UTF-8, in the metadata and
// in topic and reason, becomes U+FFFD, so that the dead letter can be
// published (pubsubtest's DeadLetterOfAnyTopic).
func DeadLetter(e Event, topic, reason string, attempts int) Event {
	d := e
	d.DeliveryAttempt = 0
	d.Metadata = make(map[string]string, len(e.Metadata)+3)
	for k, v := range e.Metadata {
		d.Metadata[strings.ToValidUTF8(k, "\uFFFD")] = strings.ToValidUTF8(v, "\uFFFD")
	}
	d.Metadata[MetaDeadTopic] = strings.ToValidUTF8(topic, "\uFFFD")
	d.Metadata[MetaDeadReason] = strings.ToValidUTF8(reason, "\uFFFD")
	d.Metadata[MetaDeadAttempts] = strconv.Itoa(attempts)
	return d
}
