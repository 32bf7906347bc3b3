package pubsub

import "context"

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
