package pubsub

import (
	"context"
	"fmt"
)

// GroupPublisher is an optional capability of a PubSub: publish an event
// for a consumer group that may not exist yet. Find it with a type
// assertion. Retention counts only the groups a topic has: an event
// published to a topic with no group may be trimmed before the group's
// first member subscribes. PublishFor closes that gap.
//
// The signals runtime publishes every signal into the thread's inbox with
// it: the inbox group is created by the first tenure, which may come after
// the signal (a thread's first signal, or an inbox deleted drained), and
// with a small retention a plain Publish could lose the signal.
type GroupPublisher interface {
	// PublishFor publishes e to topic as Publish does and, in the same
	// step, creates group on topic if it does not exist, positioned so that
	// e and everything published after it are delivered to the group (an
	// existing group keeps its position). Retention then keeps e until the
	// group acks it. An empty group returns an error wrapping ErrInvalid;
	// otherwise it fails as Publish does.
	PublishFor(ctx context.Context, topic, group string, e Event) error
}

// BatchPublisher is an optional capability of a PubSub: publish several
// events, to one topic or several, in one step and in order. Find it with a
// type assertion. A backend that can sends them together (redisstreams: one
// pipeline, one round trip, when every topic is on one Redis server or, on
// a Cluster, in one hash slot).
//
// The signals runtime stores a signal in its thread's inbox and publishes
// its wake notice with one PublishBatch: the notice must never be stored
// before the signal it announces.
type BatchPublisher interface {
	// PublishBatch publishes each of ps as Publish does (as
	// GroupPublisher.PublishFor when its Group is set), in the order
	// given: no event is stored before the ones ahead of it in ps. Every
	// publication is checked before any is sent: an invalid one (an empty
	// topic or event type, Metadata that is not valid UTF-8, a CreatedAt
	// out of range: ValidateEvent; an event too large) returns an error wrapping
	// ErrInvalid naming its index, and nothing is published; an empty ps
	// publishes nothing and returns nil. When sending fails, the events
	// before the failed one may be stored, and on Redis, which runs a
	// pipeline to its end, so may the ones after it; the error names the
	// first publication that failed.
	PublishBatch(ctx context.Context, ps []Publication) error
}

// Publication is one event of a BatchPublisher.PublishBatch.
type Publication struct {
	// Topic receives Event.
	Topic string
	// Group, when set, is created on Topic in the same step if missing,
	// as GroupPublisher.PublishFor does.
	Group string
	// Event is published as Publish would (an empty ID or CreatedAt is
	// filled in on the backend's copy).
	Event Event
}

// ValidatePublications checks every publication of a batch as Publish
// would check it (topic, event), before anything is sent, for backends and
// wrappers that implement BatchPublisher: an error wraps ErrInvalid and
// names the publication's index (and topic).
func ValidatePublications(ps []Publication) error {
	for i, p := range ps {
		if err := ValidateTopic(p.Topic); err != nil {
			return fmt.Errorf("publication %d: %w", i, err)
		}
		if _, err := PrepareEvent(p.Event); err != nil {
			return fmt.Errorf("publication %d: %w (topic %q)", i, err, p.Topic)
		}
	}
	return nil
}
