package pubsub

import "context"

// DrainedDeleter is an optional capability of a PubSub: delete a topic that
// nobody still needs. Find it with a type assertion. The signals runtime
// uses it to remove a thread's inbox when a tenure ends with the inbox
// drained, so that an idle thread leaves no stream behind. A subscriber
// that may be killed before it gets to delete its topic also subscribes
// with [ExpireWhenDrained], which has the backend delete the topic later.
type DrainedDeleter interface {
	// DeleteTopicIfDrained deletes topic, with its groups and everything it
	// retains, in one atomic step, if and only if group is its only group
	// and has been given, and has acked, every event ever published to it
	// (or the topic has no event and no group at all). It reports whether
	// the topic is gone (true also when it did not exist). An event
	// published after the deletion starts the topic afresh; a group that
	// subscribes with StartFrom(Earliest) then reads it. An empty topic or
	// group returns an error wrapping ErrInvalid; after Close, ErrClosed.
	DeleteTopicIfDrained(ctx context.Context, topic, group string) (bool, error)
}
