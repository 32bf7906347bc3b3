package pubsub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
)

var (
	// ErrClosed is returned by every call made after Close, and by
	// Unsubscribe of a subscription that its backend's Close stopped.
	ErrClosed = errors.New("pubsub: closed")

	// ErrInvalid is wrapped by every error about bad input; the message names
	// the field and the value. Compare with errors.Is.
	ErrInvalid = errors.New("pubsub: invalid argument")

	// ErrHandlerExited is the failure a backend records for an attempt
	// whose handler ended its goroutine instead of returning
	// (runtime.Goexit, as testing's FailNow and SkipNow do when a handler
	// calls them): the attempt is a nack, as a panic is, and the event is
	// redelivered; the backend keeps running the subscription's other
	// deliveries on a new goroutine. [Policy.Handle] does not return in
	// that case, so a backend notices it itself (see [Policy]).
	ErrHandlerExited = errors.New("pubsub: handler ended its goroutine (runtime.Goexit, as testing's FailNow does) instead of returning")
)

// Event is one message on a topic.
type Event struct {
	// ID identifies the event; Publish assigns a random UUID when it is empty.
	// Redeliveries keep the ID, so handlers can deduplicate on it.
	ID string
	// Type names the kind of event. It is required.
	Type string
	// RunID is an optional correlation id.
	RunID string
	// Data is the payload; it may be nil. It is carried as opaque bytes.
	Data json.RawMessage
	// Metadata carries headers such as trace context. It may be nil. Its
	// keys and values must be valid UTF-8 (ValidateEvent).
	Metadata map[string]string
	// CreatedAt is set to time.Now() by Publish when it is zero. It must
	// lie within the range of Unix nanoseconds, 1677 to 2262
	// (ValidateEvent).
	CreatedAt time.Time
	// DeliveryAttempt is set by the backend on delivery: 1 on the first
	// delivery, one more on each redelivery. It is ignored by Publish.
	DeliveryAttempt int
}

// Handler processes one delivery. Returning nil acks the event; returning an
// error nacks it, and so does a panic, which the backend recovers, and so
// does ending the goroutine instead of returning (runtime.Goexit, as
// testing's FailNow does: see [ErrHandlerExited]). The ctx is
// cancelled when the subscription is unsubscribed or the backend closes. e is
// the delivery's own copy: the handler may change e.Data and e.Metadata, and
// no other delivery (a redelivery, another subscription) sees the change.
type Handler func(ctx context.Context, e Event) error

// Publisher publishes events. Implementations are safe for concurrent use.
type Publisher interface {
	// Publish stores e on topic and returns once the backend has stored it.
	// It assigns e.ID and e.CreatedAt when they are empty. It returns an
	// error wrapping ErrInvalid for an empty topic or e.Type, ErrClosed after
	// Close, and ctx.Err() (possibly wrapped) when ctx ends first; in that
	// last case the event may or may not have been stored.
	Publish(ctx context.Context, topic string, e Event) error
}

// Subscriber subscribes handlers to topics. Implementations are safe for
// concurrent use.
type Subscriber interface {
	// Subscribe starts delivering the events of topic to h, as the options
	// say, until the returned Subscription is unsubscribed or the backend
	// closes. It returns once the subscription is in place: with
	// StartFrom(Latest) every event whose Publish starts after Subscribe
	// returned is delivered. ctx bounds only the setup, not the
	// subscription's lifetime. Bad input returns an error wrapping ErrInvalid;
	// after Close it returns ErrClosed.
	Subscribe(ctx context.Context, topic string, h Handler, opts ...SubscribeOption) (Subscription, error)
}

// PubSub is the event interface of leasebus. Backends: package inmem (one
// process) and package redisstreams (many processes).
type PubSub interface {
	Publisher
	Subscriber
	// Flush waits until work the backend does after Publish returns has been
	// done: local deliveries handed to handlers and batched acks written. It
	// returns ctx.Err() when ctx ends first.
	Flush(ctx context.Context) error
	// Close stops the backend: it waits for in-flight publishes, stops every
	// subscription (waiting for running handlers to return) and releases
	// resources the backend owns. It is idempotent and safe to call
	// concurrently; after the first call, calls of every other method return
	// ErrClosed.
	Close() error
}

// Subscription is a live subscription returned by Subscribe.
type Subscription interface {
	// Topic returns the subscribed topic.
	Topic() string
	// Unsubscribe stops deliveries and returns after every running handler of
	// this subscription has returned (or ctx ended, then ctx.Err()). Events
	// delivered to it and not acked are redelivered by the usual rules; a
	// group member's events that it nacked and was to redeliver (also those
	// whose handler failed as it stopped) go back to the group at once, each
	// as its next attempt (see "Groups" in the package documentation). It is
	// idempotent: once the subscription has stopped, every call returns
	// what the first call that saw it stopped returned, whatever its ctx;
	// when the backend's Close stopped it first, that is ErrClosed. A
	// handler that calls Unsubscribe of its
	// own subscription must pass its own ctx (which Unsubscribe cancels, so
	// the call returns ctx.Err() at once) or call it on another goroutine:
	// with a ctx that does not end, the call waits for the handler making
	// it, for ever. The same holds for PubSub.Close and Flush.
	Unsubscribe(ctx context.Context) error
}

// DeadLetterTopic returns the topic that receives the events of topic that
// failed MaxDeliveries attempts: topic + ".dead".
func DeadLetterTopic(topic string) string { return topic + ".dead" }

// Metadata keys set on a dead-lettered event, in addition to its own metadata.
const (
	// MetaDeadTopic holds the topic the event failed on.
	MetaDeadTopic = "leasebus.dead.topic"
	// MetaDeadReason holds the last error (or decode failure) of the event.
	MetaDeadReason = "leasebus.dead.reason"
	// MetaDeadAttempts holds the number of delivery attempts made.
	MetaDeadAttempts = "leasebus.dead.attempts"
)

// ValidateTopic returns an error wrapping ErrInvalid when topic is empty.
// Backends call it so that every backend words the error the same way.
func ValidateTopic(topic string) error {
	if topic == "" {
		return fmt.Errorf("%w: topic is empty", ErrInvalid)
	}
	return nil
}

// ValidateEvent returns an error wrapping ErrInvalid when e cannot be
// published: an empty Type, Metadata that is not valid UTF-8 (keys or
// values: metadata travels as text, as JSON on redisstreams), or a
// CreatedAt outside the range of Unix nanoseconds (years 1677 to 2262;
// zero is fine, Publish sets it). Every backend refuses the same events
// (pubsubtest's InvalidInput); before, inmem kept what redisstreams
// refused (review h59).
func ValidateEvent(e Event) error {
	if e.Type == "" {
		return fmt.Errorf("%w: event type is empty (event id %q)", ErrInvalid, e.ID)
	}
	for k, v := range e.Metadata {
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return fmt.Errorf("%w: metadata %q=%q is not valid UTF-8 (event id %q)", ErrInvalid, k, v, e.ID)
		}
	}
	if !e.CreatedAt.IsZero() && (e.CreatedAt.Before(minCreatedAt) || e.CreatedAt.After(maxCreatedAt)) {
		return fmt.Errorf("%w: CreatedAt %v of event %q is outside %v to %v (Unix nanoseconds)",
			ErrInvalid, e.CreatedAt, e.ID, minCreatedAt, maxCreatedAt)
	}
	return nil
}

// The range of CreatedAt: the times Unix nanoseconds can hold.
var (
	minCreatedAt = time.Unix(0, math.MinInt64).UTC()
	maxCreatedAt = time.Unix(0, math.MaxInt64).UTC()
)

// PrepareEvent validates e for publishing and fills in what Publish
// assigns: a random UUID as ID when empty and time.Now() as CreatedAt when
// zero. DeliveryAttempt is reset to 0. Backends call it at the top of Publish.
func PrepareEvent(e Event) (Event, error) {
	if err := ValidateEvent(e); err != nil {
		return Event{}, err
	}
	if e.ID == "" {
		e.ID = uuid.NewString()
	}
	if e.CreatedAt.IsZero() {
		e.CreatedAt = time.Now()
	}
	e.DeliveryAttempt = 0
	return e, nil
}

// PrepareSubscribe validates the arguments of Subscribe and applies the
// options. Backends call it at the top of Subscribe so that every backend
// rejects the same input with the same words.
func PrepareSubscribe(topic string, h Handler, opts ...SubscribeOption) (SubscribeConfig, error) {
	if err := ValidateTopic(topic); err != nil {
		return SubscribeConfig{}, err
	}
	if h == nil {
		return SubscribeConfig{}, fmt.Errorf("%w: handler is nil (topic %q)", ErrInvalid, topic)
	}
	return ApplyOptions(opts...)
}
