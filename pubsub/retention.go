package pubsub

import "context"

// Retention of the leasebus backends. Both inmem.Options and
// redisstreams.Options have a field Retention with this meaning and this
// default.
const (
	// DefaultRetention is how many of a topic's newest events a backend
	// keeps at least, when its Retention option is zero: 100,000. A group
	// that subscribes with StartFrom(Earliest) after up to this many
	// events were published to a topic receives all of them.
	DefaultRetention = 100_000
	// RetainAll, as a Retention option, keeps every event of every topic
	// until the topic is deleted.
	RetainAll = -1
)

// TopicDeleter is an optional capability of a PubSub: removing a topic and
// everything the backend keeps for it. Find it by type assertion:
//
//	if d, ok := ps.(pubsub.TopicDeleter); ok { err = d.DeleteTopic(ctx, "jobs") }
//
// Packages inmem and redisstreams implement it.
type TopicDeleter interface {
	// DeleteTopic removes topic's retained events and its consumer groups,
	// with their positions and their pending (unacked) deliveries, and
	// returns nil, also when the topic did not exist. Subscriptions that are
	// live keep running: they receive the events published after the
	// deletion (a group member recreates its group, which starts with those
	// events); a delivery in flight finishes, but if it is not acked it is
	// not delivered again (a backend shared between processes may say
	// otherwise of the fan-out subscriptions of other processes, which
	// retry from their own copy: redisstreams does). The dead-letter topic
	// DeadLetterTopic(topic) is a
	// topic of its own and is left alone. Bad input returns an error wrapping
	// ErrInvalid; after Close, ErrClosed.
	DeleteTopic(ctx context.Context, topic string) error
}
