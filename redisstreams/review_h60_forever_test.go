package redisstreams

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasebus/leasebus/inmem"
	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// TestReviewH60GoexitForeverThenUnsubscribe: a handler that ends its
// goroutine on every attempt, redelivered at once (RedeliveryDelay(0), no
// MaxDeliveries), spins, but Unsubscribe still returns and the goroutines
// do not pile up (review h60).
func TestReviewH60GoexitForeverThenUnsubscribe(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	for name, mk := range map[string]func(t *testing.T) pubsub.PubSub{
		"redis": func(t *testing.T) pubsub.PubSub { return urlBackend(t, srv.URL(), Options{Prefix: psPrefix()}) },
		"inmem": func(t *testing.T) pubsub.PubSub { b := inmem.New(); t.Cleanup(func() { b.Close() }); return b },
	} {
		for _, kind := range []string{"FanOut", "Group1", "Group3"} {
			t.Run(name+"/"+kind, func(t *testing.T) {
				ps := mk(t)
				ctx := context.Background()
				opts := []pubsub.SubscribeOption{pubsub.RedeliveryDelay(0)}
				switch kind {
				case "Group1":
					opts = append(opts, pubsub.Group("g"), pubsub.Concurrency(1))
				case "Group3":
					opts = append(opts, pubsub.Group("g"), pubsub.Concurrency(3))
				}
				var calls atomic.Int64
				sub, err := ps.Subscribe(ctx, "t", func(context.Context, pubsub.Event) error {
					calls.Add(1)
					runtime.Goexit()
					return nil
				}, opts...)
				if err != nil {
					t.Fatal(err)
				}
				for range 3 {
					if err := ps.Publish(ctx, "t", pubsub.Event{Type: "x"}); err != nil {
						t.Fatal(err)
					}
				}
				before := runtime.NumGoroutine()
				time.Sleep(500 * time.Millisecond)
				after := runtime.NumGoroutine()
				uctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				if err := sub.Unsubscribe(uctx); err != nil {
					t.Errorf("Unsubscribe: %v", err)
				}
				t.Logf("%d calls in 0.5s; goroutines %d -> %d", calls.Load(), before, after)
				if after > before+20 {
					t.Errorf("goroutines grew from %d to %d", before, after)
				}
			})
		}
	}
}
