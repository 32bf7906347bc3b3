package pubsub

import (
	"fmt"
	"time"

	"github.com/leasebus/leasebus/internal/backoff"
)

// Position says where a new subscription starts reading a topic.
type Position int

const (
	// Latest starts with the events published after Subscribe returns. It is
	// the default.
	Latest Position = iota
	// Earliest starts with the oldest event the backend still keeps for the
	// topic.
	Earliest
)

// String returns "latest" or "earliest".
func (p Position) String() string {
	switch p {
	case Latest:
		return "latest"
	case Earliest:
		return "earliest"
	}
	return fmt.Sprintf("Position(%d)", int(p))
}

// Defaults of the subscribe options.
const (
	// DefaultConcurrency is the number of handlers in flight per subscription
	// when Concurrency is not given: one, so events are handled in order.
	DefaultConcurrency = 1
	// DefaultAckDeadline is how long a group delivery may stay unacked before
	// another member may take it over, when AckDeadline is not given.
	DefaultAckDeadline = 30 * time.Second
	// DefaultMaxDeliveries is the number of attempts after which an event is
	// dead-lettered when MaxDeliveries is not given: 0, never; a failing
	// event is retried (with backoff) until a handler acks it.
	DefaultMaxDeliveries = 0
	// DefaultRedeliveryDelay is how long a nacked event waits before its
	// first redelivery when RedeliveryDelay is not given.
	DefaultRedeliveryDelay = 10 * time.Millisecond
	// MaxRedeliveryDelay caps the doubling of the redelivery delay: a nacked
	// event never waits longer than this, or than the RedeliveryDelay given
	// when that is longer.
	MaxRedeliveryDelay = time.Second
	// MaxConcurrency is the largest Concurrency a subscription may ask
	// for: each handler slot is a goroutine (and, on redisstreams, a slot of
	// read-ahead), so a larger value would only exhaust memory.
	MaxConcurrency = 1 << 16
	// MinAckDeadline is the shortest AckDeadline: backends count ack
	// deadlines in milliseconds, and a shorter one would hand every delivery
	// to another member as soon as it started.
	MinAckDeadline = time.Millisecond
)

// SubscribeConfig is the result of applying SubscribeOptions. Backends read
// it through ApplyOptions; users set it through the option functions.
type SubscribeConfig struct {
	// Group is the consumer group name; "" means fan-out.
	Group string
	// StartFrom is where a new group or fan-out subscription starts. An
	// existing group keeps its own position.
	StartFrom Position
	// Concurrency is the number of handlers in flight, at least 1.
	Concurrency int
	// AckDeadline is how long a delivery may stay unacked before it is
	// redelivered to a live member.
	AckDeadline time.Duration
	// MaxDeliveries is the number of failed attempts after which the event
	// goes to DeadLetterTopic; 0 means never.
	MaxDeliveries int
	// ClaimPending makes the new member take over, before any new event,
	// every delivery of its group that is pending on another member.
	ClaimPending bool
	// RedeliveryDelay is how long a nacked event waits before its first
	// redelivery; each further failed attempt doubles it, up to
	// MaxRedeliveryDelay (or RedeliveryDelay itself when longer). 0
	// redelivers at once.
	RedeliveryDelay time.Duration
	// RedeliveryCap caps the doubling of the redelivery delay (see
	// [RedeliveryCap]); 0 means MaxRedeliveryDelay.
	RedeliveryCap time.Duration
	// ReadOnDemand makes a group subscription read only when told to (see
	// [ReadOnDemand] and [Kicker]).
	ReadOnDemand bool
	// ExpireWhenDrained, when positive, asks the backend to delete the
	// topic that long after an ack of the subscription left it drained
	// (see [ExpireWhenDrained]); 0 never.
	ExpireWhenDrained time.Duration

	err error
}

// SubscribeOption configures one Subscribe call.
type SubscribeOption func(*SubscribeConfig)

// Group makes the subscription one member of the named consumer group: each
// event of the topic goes to exactly one member. An empty name is invalid.
func Group(name string) SubscribeOption {
	return func(c *SubscribeConfig) {
		if name == "" {
			c.fail(fmt.Errorf("%w: group name is empty", ErrInvalid))
		}
		c.Group = name
	}
}

// StartFrom sets where a new group or fan-out subscription starts reading.
func StartFrom(p Position) SubscribeOption {
	return func(c *SubscribeConfig) {
		if p != Latest && p != Earliest {
			c.fail(fmt.Errorf("%w: start position %d is neither Latest nor Earliest", ErrInvalid, int(p)))
		}
		c.StartFrom = p
	}
}

// Concurrency sets how many handlers of the subscription may run at once
// (default 1, in order). n must be at least 1 and at most MaxConcurrency.
func Concurrency(n int) SubscribeOption {
	return func(c *SubscribeConfig) {
		switch {
		case n < 1:
			c.fail(fmt.Errorf("%w: concurrency %d is below 1", ErrInvalid, n))
		case n > MaxConcurrency:
			c.fail(fmt.Errorf("%w: concurrency %d is above %d (MaxConcurrency)", ErrInvalid, n, MaxConcurrency))
		}
		c.Concurrency = n
	}
}

// AckDeadline sets how long a delivery may stay unacked before it is
// redelivered to a live member (default DefaultAckDeadline). A handler that
// runs longer than d may see its event delivered again elsewhere, so d should
// exceed the longest handler; a group member whose every handler runs
// longer than d also hands back the events it holds and has not started.
// d must be at least MinAckDeadline (1ms).
func AckDeadline(d time.Duration) SubscribeOption {
	return func(c *SubscribeConfig) {
		switch {
		case d <= 0:
			c.fail(fmt.Errorf("%w: ack deadline %v is not positive", ErrInvalid, d))
		case d < MinAckDeadline:
			c.fail(fmt.Errorf("%w: ack deadline %v is below %v (MinAckDeadline)", ErrInvalid, d, MinAckDeadline))
		}
		c.AckDeadline = d
	}
}

// MaxDeliveries sets after how many failed attempts an event goes to the
// dead-letter topic (default 0: never). n must not be negative. Attempts
// are counted per delivery (package doc, "Dead letters"): on redisstreams
// an event a member read ahead and never ran before it died counts one,
// so MaxDeliveries(1) can dead-letter it without a run.
func MaxDeliveries(n int) SubscribeOption {
	return func(c *SubscribeConfig) {
		if n < 0 {
			c.fail(fmt.Errorf("%w: max deliveries %d is negative", ErrInvalid, n))
		}
		c.MaxDeliveries = n
	}
}

// ClaimPending makes a new member of a group take over every delivery that
// is pending (delivered, not yet acked) on any other member of the group, live
// or dead, and receive those first, in publish order and counted as
// redeliveries, before any event not yet delivered. Without it such
// deliveries come back only after AckDeadline, behind newer events.
//
// Use it only when the caller is known, by other means, to be the group's
// sole legitimate consumer (for example it holds a fenced lease on the
// group's topic, as the signals runtime does for a thread's inbox): a member
// still running a taken delivery may ack it too, and the event then counts as
// acked. It requires Group; on a fan-out subscription it is an error.
func ClaimPending() SubscribeOption {
	return func(c *SubscribeConfig) { c.ClaimPending = true }
}

// RedeliveryDelay sets how long a nacked event (handler error or panic)
// waits before it is delivered again: d after the first failed attempt,
// doubled after each further one, at most MaxRedeliveryDelay (or d, when d is
// longer). Default DefaultRedeliveryDelay; 0 redelivers at once, which suits
// tests but makes an event that always fails spin unless MaxDeliveries is
// set. A redelivery after an AckDeadline ran out is not delayed further. d
// must not be negative.
func RedeliveryDelay(d time.Duration) SubscribeOption {
	return func(c *SubscribeConfig) {
		if d < 0 {
			c.fail(fmt.Errorf("%w: redelivery delay %v is negative", ErrInvalid, d))
		}
		c.RedeliveryDelay = d
	}
}

// RedeliveryCap caps the doubling of the redelivery delay at d instead of
// MaxRedeliveryDelay: a nacked event waits RedeliveryDelay after its first
// failed attempt, doubled after each further one, at most max(d,
// RedeliveryDelay). RedeliveryCap(d) with RedeliveryDelay(d) makes every
// wait d, as the signals runtime does with its recovery interval. d must be
// positive.
func RedeliveryCap(d time.Duration) SubscribeOption {
	return func(c *SubscribeConfig) {
		if d <= 0 {
			c.fail(fmt.Errorf("%w: redelivery cap %v is not positive", ErrInvalid, d))
		}
		c.RedeliveryCap = d
	}
}

// ReadOnDemand makes a group subscription read new events only when told
// to, instead of waiting for them: once as it starts, and again after each
// [Kicker.Kick] of the Subscription, reading until it has read everything
// published before the Kick (and, as usual, no further ahead than its
// Concurrency). Redeliveries
// (nacks, AckDeadline take-overs, ClaimPending) are unaffected. It is for
// callers that subscribe to many topics and learn by other means when one
// has something new, such as the signals runtime, which holds one such
// subscription per active thread: on redisstreams such a subscription
// holds no connection blocked in a read, so their number does not bound or
// exhaust the connection pool. A backend without connections to spare
// (inmem) may deliver without a Kick; what it must never do is miss an
// event published before a Kick. It requires Group.
//
// The caller must Kick after every publish it wants read: an event
// published after the last read that found nothing new waits, unread, until
// the next Kick. The backend's Flush kicks the ReadOnDemand subscriptions of
// the topics published through it, since it waits for their deliveries.
func ReadOnDemand() SubscribeOption {
	return func(c *SubscribeConfig) { c.ReadOnDemand = true }
}

// ExpireWhenDrained makes a group subscription leave its topic to be
// deleted ttl after it drained it: each time an ack of the subscription
// leaves the topic drained (the condition of [DrainedDeleter]: the group is
// the topic's only group and has been given, and has acked, every event
// published to it), the backend sets the topic, with its groups, to be
// deleted after ttl, in the same atomic step as the ack. An event published
// to the topic with [GroupPublisher.PublishFor] (or as a [Publication] with
// Group set) cancels the deletion in the same atomic step as its add, so
// no event published that way is ever deleted unread; so does a read of the
// subscription that returns events (on redisstreams), so that an event
// published otherwise is not deleted while the subscription holds it. A
// group created on the topic later (another group subscription) cancels it
// too, in the same step as its creation: the events it is given are not
// deleted under it. A subscription that creates the topic (Subscribe before
// any event was published) sets the deletion at once: the topic is drained.
//
// It is for topics that only PublishFor writes and that a process killed
// while it holds them must not leave behind for ever, such as the signals
// runtime's thread inboxes: a subscriber that stops normally deletes such a
// topic itself (DrainedDeleter), one that is killed cannot. A Publish
// without a group does not cancel the deletion: an event published so
// after the drain may be deleted with the topic before it is read. Pick
// ttl longer than the subscriber stays subscribed to a drained topic, or
// the topic may vanish under it (nothing unread is lost: a group read finds its group
// missing and makes it again, as after a DrainedDeleter deletion). A
// backend whose topics live no longer than its process (inmem) ignores
// the option. It requires Group; ttl must be positive.
//
// Only the topic is deleted: its dead letters ([MaxDeliveries]) are on
// [DeadLetterTopic](topic), a topic of its own that this option does not
// expire. Each backend says how long it keeps such a topic (on
// redisstreams, until it is deleted or its Options.StreamIdleTTL passes:
// each topic that dead-lettered leaves one stream).
func ExpireWhenDrained(ttl time.Duration) SubscribeOption {
	return func(c *SubscribeConfig) {
		if ttl <= 0 {
			c.fail(fmt.Errorf("%w: expire-when-drained ttl %v is not positive", ErrInvalid, ttl))
		}
		c.ExpireWhenDrained = ttl
	}
}

// Kicker is implemented by the subscriptions of backends that support
// [ReadOnDemand]. Kick makes the subscription read what was published
// before the call (at once, or right after a read in progress); it never
// blocks, and calls while a read is pending coalesce. On a subscription
// made without ReadOnDemand it does nothing.
type Kicker interface {
	Kick()
}

func (c *SubscribeConfig) fail(err error) {
	if c.err == nil {
		c.err = err
	}
}

// ApplyOptions returns the configuration the options describe, with the
// defaults filled in, or the first error (wrapping ErrInvalid) an option
// reported. A nil option is an error too.
func ApplyOptions(opts ...SubscribeOption) (SubscribeConfig, error) {
	c := SubscribeConfig{
		StartFrom:       Latest,
		Concurrency:     DefaultConcurrency,
		AckDeadline:     DefaultAckDeadline,
		MaxDeliveries:   DefaultMaxDeliveries,
		RedeliveryDelay: DefaultRedeliveryDelay,
	}
	for i, o := range opts {
		if o == nil {
			return SubscribeConfig{}, fmt.Errorf("%w: subscribe option %d is nil", ErrInvalid, i)
		}
		o(&c)
	}
	if c.err != nil {
		return SubscribeConfig{}, c.err
	}
	if c.ClaimPending && c.Group == "" {
		return SubscribeConfig{}, fmt.Errorf("%w: claim pending needs a group (fan-out subscriptions have nothing pending)", ErrInvalid)
	}
	if c.ReadOnDemand && c.Group == "" {
		return SubscribeConfig{}, fmt.Errorf("%w: read on demand needs a group (a fan-out subscription reads every event anyway)", ErrInvalid)
	}
	if c.ExpireWhenDrained > 0 && c.Group == "" {
		return SubscribeConfig{}, fmt.Errorf("%w: expire when drained needs a group (a fan-out subscription acks nothing)", ErrInvalid)
	}
	return c, nil
}

// RetryDelay returns how long a backend waits before redelivering an event
// whose attempt failed, with the default RedeliveryDelay: 10ms doubled per
// attempt, at most 1s. It is [Policy.RedeliveryDelay] of a subscription
// without the RedeliveryDelay option.
func RetryDelay(attempt int) time.Duration {
	return redeliveryDelay(DefaultRedeliveryDelay, attempt)
}

// redeliveryDelay returns the wait before redelivering an event whose
// attempt (from 1) failed, for a first delay of d.
func redeliveryDelay(d time.Duration, attempt int) time.Duration {
	return cappedDelay(d, MaxRedeliveryDelay, attempt)
}

// cappedDelay is d doubled per attempt after the first, at most max(limit,
// d).
func cappedDelay(d, limit time.Duration, attempt int) time.Duration {
	return backoff.Policy{Min: d, Max: max(limit, d)}.Delay(attempt - 1)
}
