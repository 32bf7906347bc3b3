package pubsub

import (
	"context"
	"time"
)

// Backlog describes what one consumer group of a topic has yet to finish, as
// a [BacklogReader] reports it.
type Backlog struct {
	// Pending counts events delivered to a member of the group and not yet
	// acked.
	Pending int64
	// Lag counts events of the topic not yet delivered to the group (all the
	// topic's retained events when the group does not exist yet); -1 when
	// the backend cannot tell.
	Lag int64
	// LastPublished is when the newest event of the topic was stored, by
	// the backend's clock; zero when the topic has no event.
	LastPublished time.Time
}

// BacklogReader is an optional capability of a PubSub, for operators and
// status pages: read how far a consumer group is behind on a topic. Find it
// with a type assertion.
type BacklogReader interface {
	// GroupBacklog returns the backlog of group on topic. A topic that does
	// not exist has a zero Backlog. An empty topic or group returns an error
	// wrapping ErrInvalid; after Close, ErrClosed.
	GroupBacklog(ctx context.Context, topic, group string) (Backlog, error)
}
