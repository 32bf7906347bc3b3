package inmem_test

import (
	"sync"
	"testing"
	"time"

	"github.com/leasebus/leasebus/inmem"
	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/lease/leasetest"
)

func TestLeaseConformance(t *testing.T) {
	var clocks sync.Map // *inmem.Backend → *inmem.ManualClock
	leasetest.Run(t, leasetest.Config{
		New: func(t *testing.T) lease.Provider {
			c := inmem.NewManualClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
			b, err := inmem.NewWithOptions(inmem.Options{Clock: c})
			if err != nil {
				t.Fatal(err)
			}
			clocks.Store(b, c)
			t.Cleanup(func() {
				b.Close()
				clocks.Delete(b)
			})
			return b
		},
		Advance: func(t *testing.T, p lease.Provider, d time.Duration) {
			c, ok := clocks.Load(p)
			if !ok {
				t.Fatalf("no clock for provider %T", p)
			}
			c.(*inmem.ManualClock).Advance(d)
		},
		TTL: 30 * time.Second,
	})
}

// TestLeaseConformanceSystemClock runs the suite on the system clock with a
// short TTL, so that lazy expiry against time.Now is covered too.
func TestLeaseConformanceSystemClock(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped with -short: sleeps through real lease expiry")
	}
	leasetest.Run(t, leasetest.Config{
		New: func(t *testing.T) lease.Provider {
			b := inmem.New()
			t.Cleanup(func() { b.Close() })
			return b
		},
		TTL: 100 * time.Millisecond,
	})
}
