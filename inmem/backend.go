package inmem

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"time"

	"github.com/leasebus/leasebus/internal/lifecycle"
	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/pubsub"
)

// Clock tells the time. The Backend reads lease expiry and ack deadlines from
// it.
type Clock interface {
	Now() time.Time
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// ManualClock is a Clock that moves only when told to, for tests. It is safe
// for concurrent use.
type ManualClock struct {
	mu  sync.Mutex
	now time.Time
}

// NewManualClock returns a ManualClock reading start.
func NewManualClock(start time.Time) *ManualClock { return &ManualClock{now: start} }

// Now returns the clock's time.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d (d must not be negative; a negative d
// is ignored, because clocks do not go back).
func (c *ManualClock) Advance(d time.Duration) {
	if d < 0 {
		return
	}
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// ErrInvalid is wrapped by the errors about bad Options. Errors about bad
// arguments of the pubsub and lease methods wrap pubsub.ErrInvalid and
// lease.ErrInvalid instead, as those contracts say.
var ErrInvalid = errors.New("inmem: invalid argument")

// Defaults of Options.
const (
	// DefaultRetention is Options.Retention's default, the same as every
	// leasebus backend's: pubsub.DefaultRetention (100,000 events).
	DefaultRetention = pubsub.DefaultRetention
	// DefaultTopicIdleTTL is Options.TopicIdleTTL's default.
	DefaultTopicIdleTTL = 10 * time.Minute
)

// Options configures a Backend. The zero value is valid; each field's default
// is the Default constant of the same name.
type Options struct {
	// Clock tells the time of lease expiry, ack deadlines and idle times
	// (TopicIdleTTL). Default: the system clock.
	Clock Clock
	// Retention is how many of each topic's newest events the Backend keeps
	// at least, for StartFrom(Earliest) to replay (see "Retention" in package
	// pubsub). Events a group has not acked, or a fan-out subscription has
	// not read, are kept whatever it says. It trims in steps of a quarter of
	// Retention (at least 64 events), so a topic holds up to about 1.25 ×
	// Retention events beyond what its readers still need. Default
	// DefaultRetention; pubsub.RetainAll (-1) keeps every event; otherwise it
	// must be positive.
	Retention int
	// TopicIdleTTL is how long the Backend keeps a topic nobody uses: a
	// topic with no fan-out subscription, no publish or subscribe for
	// TopicIdleTTL, and whose groups have all had no member for TopicIdleTTL
	// and have read and acked every event, is forgotten with its retained
	// events and its groups (their positions). A group with an unread or
	// unacked event is never forgotten, nor is its topic. A group
	// subscribing to a forgotten topic starts as a new group, where its
	// StartFrom says, on a topic that holds only what was published since.
	// Idle topics are looked for at most once a minute (by Clock), on
	// Publish and Subscribe. Default DefaultTopicIdleTTL; it must not be
	// negative.
	TopicIdleTTL time.Duration
}

// validate fills in the defaults of o, or reports the first bad field.
func (o *Options) validate() error {
	switch {
	case o.Retention == 0:
		o.Retention = DefaultRetention
	case o.Retention < pubsub.RetainAll:
		return fmt.Errorf("%w: Retention %d is below -1 (pubsub.RetainAll)", ErrInvalid, o.Retention)
	}
	switch {
	case o.TopicIdleTTL == 0:
		o.TopicIdleTTL = DefaultTopicIdleTTL
	case o.TopicIdleTTL < 0:
		return fmt.Errorf("%w: TopicIdleTTL %v is negative", ErrInvalid, o.TopicIdleTTL)
	}
	if o.Clock == nil {
		o.Clock = systemClock{}
	} else {
		// A nil value of a kind that can be nil (a nil *ManualClock, a nil
		// func type) is not nil as an interface and panics on its first Now.
		switch v := reflect.ValueOf(o.Clock); v.Kind() {
		case reflect.Pointer, reflect.Map, reflect.Func, reflect.Chan, reflect.Slice:
			if v.IsNil() {
				return fmt.Errorf("%w: Clock is a nil %T", ErrInvalid, o.Clock)
			}
		}
	}
	return nil
}

// Backend is an in-process pubsub.PubSub and lease.Provider. It is safe for
// concurrent use. Create it with New or NewWithOptions and Close it when done.
type Backend struct {
	clock Clock
	opts  Options
	life  lifecycle.Closer

	leases leaseTable // lease.go
	bus    bus        // pubsub.go
}

var (
	_ pubsub.PubSub       = (*Backend)(nil)
	_ pubsub.TopicDeleter = (*Backend)(nil)
	_ lease.Provider      = (*Backend)(nil)
	_ lease.Inspector     = (*Backend)(nil)
	_ lease.BatchRenewer  = (*Backend)(nil)
)

// New returns a Backend with default options.
func New() *Backend {
	b, _ := NewWithOptions(Options{}) // the zero Options are valid
	return b
}

// NewWithOptions returns a Backend configured by o, or an error wrapping
// ErrInvalid that names a bad field.
func NewWithOptions(o Options) (*Backend, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	b := &Backend{clock: o.Clock, opts: o}
	b.leases.init()
	b.bus.init(b)
	return b, nil
}

// Close stops every subscription (waiting for running handlers to return)
// and makes every later call return pubsub.ErrClosed or lease.ErrClosed. It
// is Shutdown with a ctx that never ends: idempotent, safe to call
// concurrently, and every call returns once the shutdown is complete.
func (b *Backend) Close() error { return b.Shutdown(context.Background()) }

// Shutdown closes the Backend as Close does, but waits only until ctx ends.
// From its first call on, every other method returns pubsub.ErrClosed or
// lease.ErrClosed. It waits for publishes in progress, then stops every
// subscription: it cancels the ctx of running handlers and waits for them to
// return. When they have, it returns nil (a later call returns nil too).
//
// When ctx ends first, Shutdown returns ctx.Err() at once. The Backend is
// closed all the same; what a handler that ignores its ctx is still running
// keeps running, and its outcome (ack or nack) is recorded nowhere that
// lasts: an in-process Backend keeps no event once closed, so that delivery
// is neither acked nor delivered again. The rest of the shutdown (forgetting
// the topics) happens when the last such handler returns; a later Close or
// Shutdown waits for that.
func (b *Backend) Shutdown(ctx context.Context) error {
	return b.life.Shutdown(ctx, func(<-chan struct{}) error {
		b.bus.close()
		return nil
	})
}

// isClosed reports whether Close or Shutdown was called.
func (b *Backend) isClosed() bool { return b.life.Closed() }
