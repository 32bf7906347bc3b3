package inmem

import (
	"context"

	"github.com/leasebus/leasebus/pubsub"

	"time"
)

// trimStep returns how many events a topic log grows by between two trims:
// a quarter of the retention, at least 64.
func (bus *bus) trimStep() int {
	r := bus.b.opts.Retention
	if r == pubsub.RetainAll {
		return int(^uint(0) >> 1) // never
	}
	return max(r/4, 64)
}

// trim drops the events that are older than the newest Retention and that no
// reader needs: below the cursor of every fan-out subscription and of every
// group. A group's delivered and unacked events are kept by its items (by
// value), so they are never lost by a trim either. t.mu must be held.
func (t *topic) trim(retention int, step int) {
	if retention == pubsub.RetainAll {
		t.trimAt = step
		return
	}
	keep := t.base
	if t.next > uint64(retention) {
		keep = max(keep, t.next-uint64(retention))
	}
	for r := range t.fanouts {
		keep = min(keep, r.cursor)
	}
	for _, r := range t.groups {
		keep = min(keep, r.cursor)
	}
	if keep > t.base {
		n := int(keep - t.base)
		clear(t.events[:n])
		t.events = t.events[n:]
		t.base = keep
		if cap(t.events) > 4*max(len(t.events), step) {
			t.events = append([]pubsub.Event(nil), t.events...)
		}
	}
	t.trimAt = len(t.events) + step
}

// idle reports whether the group r can be forgotten at now: no member for
// ttl, and nothing it could still deliver (everything read and acked, no
// redelivery waiting, no attempt running). t.mu must be held.
func (r *reader) idle(now time.Time, ttl time.Duration) bool {
	return len(r.members) == 0 && !r.idleSince.IsZero() && now.Sub(r.idleSince) >= ttl &&
		r.cursor >= r.t.next && len(r.pending) == 0 && len(r.retries) == 0 && len(r.running) == 0
}

// sweep forgets, at most once per sweepEvery, the topics nobody uses (see
// Options.TopicIdleTTL): no fan-out subscription, no publish or subscribe
// for the idle time, and every group idle (no member for the idle time and
// nothing left to deliver). Groups go only with their topic, so a group that
// subscribes again never finds its topic's old events without its old
// position. bus.mu must be held.
func (bus *bus) sweep(now time.Time) {
	if now.Sub(bus.lastSweep) < sweepEvery {
		return
	}
	bus.lastSweep = now
	ttl := bus.b.opts.TopicIdleTTL
	for name, t := range bus.topics {
		t.mu.Lock()
		idle := len(t.fanouts) == 0 && now.Sub(t.lastPublish) >= ttl
		for _, r := range t.groups {
			idle = idle && r.idle(now, ttl)
		}
		t.mu.Unlock()
		if idle {
			delete(bus.topics, name)
		}
	}
	// A Go map keeps its table when entries are deleted: make smaller ones
	// once most entries are gone.
	if bus.peakTopics >= 1024 && len(bus.topics) < bus.peakTopics/4 {
		bus.topics = shrunk(bus.topics)
		bus.peakTopics = len(bus.topics)
	}
	if bus.peakSubs >= 1024 && len(bus.subs) < bus.peakSubs/4 {
		bus.subs = shrunk(bus.subs)
		bus.peakSubs = len(bus.subs)
	}
}

// DeleteTopic removes topic's retained events and its groups, with their
// positions and unacked deliveries (pubsub.TopicDeleter). Live subscriptions
// keep running and receive the events published after the call: a fan-out
// subscription and a group with members skip every event published before
// it, a delivery in flight finishes, and an unacked one is not delivered
// again. It returns nil also when the topic does not exist; an error
// wrapping pubsub.ErrInvalid for an empty topic; pubsub.ErrClosed after
// Close; ctx.Err() when ctx has ended.
func (b *Backend) DeleteTopic(ctx context.Context, topic string) error {
	if b.isClosed() {
		return pubsub.ErrClosed
	}
	if err := pubsub.ValidateTopic(topic); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	bus := &b.bus
	bus.mu.Lock()
	defer bus.mu.Unlock()
	if bus.closing {
		return pubsub.ErrClosed
	}
	t := bus.topics[topic]
	if t == nil {
		return nil
	}
	t.mu.Lock()
	clear(t.events)
	t.events = nil
	t.base = t.next
	t.trimAt = bus.trimStep()
	for r := range t.fanouts {
		r.forgetPast()
	}
	for g, r := range t.groups {
		if len(r.members) == 0 {
			delete(t.groups, g)
			continue
		}
		r.forgetPast()
	}
	empty := len(t.fanouts) == 0 && len(t.groups) == 0
	t.mu.Unlock()
	if empty {
		delete(bus.topics, topic)
	}
	bus.progressed()
	return nil
}

// forgetPast moves the reader past every event of its topic and drops its
// pending deliveries and redeliveries (those in flight finish, and an ack of
// theirs changes nothing; a failure of theirs is not delivered again,
// settle). t.mu must be held.
func (r *reader) forgetPast() {
	r.cursor = r.t.next
	r.forgotten = r.t.next
	for it := range r.pending {
		it.done = true
	}
	clear(r.pending)
	for _, it := range r.retries {
		it.done = true
		it.queued = false
	}
	clear(r.retries)
	r.retries = r.retries[:0]
	// So are the deliveries a ClaimPending member took over and has not
	// started.
	for _, m := range r.members {
		for _, it := range m.claims {
			it.done = true
			it.claimed = false
		}
		clear(m.claims)
		m.claims = nil
	}
}

// shrunk returns a copy of m in a table sized for its entries (maps.Clone
// copies the table as it is, however empty).
func shrunk[K comparable, V any](m map[K]V) map[K]V {
	n := make(map[K]V, len(m))
	for k, v := range m {
		n[k] = v
	}
	return n
}
