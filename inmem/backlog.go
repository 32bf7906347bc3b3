package inmem

import (
	"context"
	"fmt"

	"github.com/leasebus/leasebus/pubsub"
)

var _ pubsub.BacklogReader = (*Backend)(nil)

// GroupBacklog returns the backlog of group on topic (pubsub.BacklogReader):
// Pending counts the group's deliveries in flight or waiting for a retry,
// Lag the events it has not read yet, and LastPublished is when the topic's
// newest event was published, by the Backend's Clock (not the event's
// CreatedAt, which a publisher may set: pubsubtest.RunBacklog). It returns an error wrapping pubsub.ErrInvalid
// for an empty topic or group, pubsub.ErrClosed after Close, and ctx.Err()
// when ctx has ended.
func (b *Backend) GroupBacklog(ctx context.Context, topic, group string) (pubsub.Backlog, error) {
	switch {
	case topic == "":
		return pubsub.Backlog{}, fmt.Errorf("%w: topic is empty", pubsub.ErrInvalid)
	case group == "":
		return pubsub.Backlog{}, fmt.Errorf("%w: group is empty (topic %q)", pubsub.ErrInvalid, topic)
	case b.isClosed():
		return pubsub.Backlog{}, pubsub.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return pubsub.Backlog{}, err
	}
	bus := &b.bus
	bus.mu.Lock()
	t := bus.topics[topic]
	bus.mu.Unlock()
	if t == nil {
		return pubsub.Backlog{}, nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	var bl pubsub.Backlog
	if n := len(t.events); n > 0 {
		bl.LastPublished = t.lastStored
	}
	r := t.groups[group]
	if r == nil {
		bl.Lag = int64(t.next - t.base)
		return bl, nil
	}
	bl.Lag = int64(t.next - r.cursor)
	bl.Pending = int64(len(r.pending) + len(r.retries))
	// Deliveries a ClaimPending member took over and has not started yet
	// are out of pending and retries, still delivered and unacked.
	for _, m := range r.members {
		for _, it := range m.claims {
			if !it.done {
				bl.Pending++
			}
		}
	}
	return bl, nil
}
