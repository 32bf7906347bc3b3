package main

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/lease/leasetest"
	"github.com/leasebus/leasebus/pubsub"
	"github.com/leasebus/leasebus/pubsub/pubsubtest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fakeClock is a lease clock that moves only when told to.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// TestLeaseConformance runs the lease contract suite on MapLeases with a
// fake clock, so expiry needs no sleeping.
func TestLeaseConformance(t *testing.T) {
	var clocks sync.Map // *MapLeases -> *fakeClock
	leasetest.Run(t, leasetest.Config{
		New: func(t *testing.T) lease.Provider {
			c := &fakeClock{now: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
			m := NewMapLeases()
			m.now = c.Now
			clocks.Store(m, c)
			t.Cleanup(func() {
				m.Close()
				clocks.Delete(m)
			})
			return m
		},
		Advance: func(t *testing.T, p lease.Provider, d time.Duration) {
			c, ok := clocks.Load(p)
			if !ok {
				t.Fatalf("no clock for provider %T", p)
			}
			c.(*fakeClock).Advance(d)
		},
		TTL: 30 * time.Second,
	})
}

// TestPubSubConformance runs the pubsub contract suite on ChanBus, with
// every feature on.
func TestPubSubConformance(t *testing.T) {
	pubsubtest.Run(t, pubsubtest.Config{
		New: func(t *testing.T) pubsub.PubSub { return NewChanBus() },
		NewPeer: func(t *testing.T, ps pubsub.PubSub) pubsub.PubSub {
			return ps // one process: the peer is the bus itself
		},
		Features: pubsubtest.Features{ConsumerGroups: true, AckDeadline: true, Persistent: true},
	})
}

// TestRun runs the example's main.
func TestRun(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	want := `lease capability found: true
worker-1 acquired thread/42: true (token 1)
worker-2 acquired thread/42: false: lease "thread/42" held by worker-1, expires in 10s
after transfer: held by worker-2 with token 2
audit got order.created {"order":1}
mailer got order.created {"order":1}
`
	if got := out.String(); got != want {
		t.Errorf("output:\n%s\nwant:\n%s", got, want)
	}
}
