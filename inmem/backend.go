package inmem

import (
	"context"
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

// Options configures a Backend. The zero value is valid.
type Options struct {
	// Clock is the lease clock. Default: the system clock.
	Clock Clock
}

// Backend is an in-process pubsub.PubSub and lease.Provider. It is safe for
// concurrent use. Create it with New or NewWithOptions and Close it when done.
type Backend struct {
	clock Clock
	life  lifecycle.Closer

	leases leaseTable // lease.go
	bus    bus        // pubsub.go
}

var (
	_ pubsub.PubSub      = (*Backend)(nil)
	_ lease.Provider     = (*Backend)(nil)
	_ lease.Inspector    = (*Backend)(nil)
	_ lease.BatchRenewer = (*Backend)(nil)
)

// New returns a Backend with default options.
func New() *Backend { return NewWithOptions(Options{}) }

// NewWithOptions returns a Backend configured by o.
func NewWithOptions(o Options) *Backend {
	b := &Backend{clock: o.Clock}
	if b.clock == nil {
		b.clock = systemClock{}
	}
	b.leases.init()
	b.bus.init(b)
	return b
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
