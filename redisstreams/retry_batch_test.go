package redisstreams

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// xclaimTrips counts the round trips that carry an XCLAIM.
type xclaimTrips struct{ n atomic.Int64 }

func (h *xclaimTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *xclaimTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if strings.EqualFold(cmd.Name(), "xclaim") {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (h *xclaimTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			if strings.EqualFold(c.Name(), "xclaim") {
				h.n.Add(1)
				break
			}
		}
		return next(ctx, cmds)
	}
}

// TestNackBurstRedeliveredInFewRoundTrips: entries nacked together (on a
// Concurrency above 1, where a nacked entry waits out its redelivery delay
// holding no handler) come back claimed in pipelines of up to retryBatch,
// not one XCLAIM round trip each, and every one is delivered again and
// acked. Before, 500 nacks cost 500 round trips per redelivery, one after
// the other: the signals runtime's wake notices of threads busy elsewhere
// (thousands behind long runs) came back slower than their recovery
// interval.
func TestNackBurstRedeliveredInFewRoundTrips(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	b, err := NewURL(ctx, srv.URL(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	hook := &xclaimTrips{}
	b.Client().AddHook(hook)
	const n = 500
	var (
		mu       sync.Mutex
		attempts = map[string]int{}
		acked    atomic.Int64
	)
	sub, err := b.Subscribe(ctx, "burst", func(_ context.Context, ev pubsub.Event) error {
		mu.Lock()
		attempts[ev.ID]++
		mu.Unlock()
		if ev.DeliveryAttempt < 2 {
			return context.Canceled // nack
		}
		acked.Add(1)
		return nil
	}, pubsub.Group("g"), pubsub.StartFrom(pubsub.Earliest), pubsub.Concurrency(64),
		pubsub.AckDeadline(10*time.Second), pubsub.RedeliveryDelay(200*time.Millisecond), pubsub.RedeliveryCap(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe(context.Background()) })
	for range n {
		if err := b.Publish(ctx, "burst", pubsub.Event{Type: "x"}); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for acked.Load() < n && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := acked.Load(); got != n {
		t.Fatalf("%d of %d nacked entries were delivered again and acked within 30s", got, n)
	}
	trips := hook.n.Load()
	t.Logf("%d nacked entries came back in %d round trips carrying XCLAIM", n, trips)
	if trips > n/10 {
		t.Errorf("%d nacked entries came back in %d XCLAIM round trips, want at most %d (claimed in pipelines)", n, trips, n/10)
	}
	mu.Lock()
	defer mu.Unlock()
	for id, a := range attempts {
		if a != 2 {
			t.Errorf("entry %s delivered %d times, want 2", id, a)
		}
	}
}
