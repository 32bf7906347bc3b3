package inmem

import (
	"sync"
	"time"

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

	mu     sync.Mutex
	closed bool

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
// is idempotent and safe to call concurrently.
func (b *Backend) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		b.bus.wait()
		return nil
	}
	b.closed = true
	b.mu.Unlock()
	b.bus.close()
	return nil
}

// isClosed reports whether Close was called.
func (b *Backend) isClosed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.closed
}
