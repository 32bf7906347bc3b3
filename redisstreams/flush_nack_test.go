package redisstreams

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasebus/leasebus/inmem"
	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// TestFlushDoesNotWaitForNackedRedelivery: pubsub/pubsub.go:78-80, PubSub.Flush
// "waits until work the backend does after Publish returns has been done:
// local deliveries handed to handlers and batched acks written". A handler
// that nacks has been handed its delivery, and a nack writes no ack; inmem
// (inmem/pubsub.go:362) keeps this: "A nacked event that waits for its
// redelivery does not hold Flush up". On redisstreams Flush waits until
// the event is handled successfully: with a handler that keeps failing
// (default MaxDeliveries 0: retried for ever) every Flush of the Backend
// runs until its ctx ends, for a fan-out subscription (no ack involved)
// as for a group one. inmem subtests are the control.
//
// Found by review h53 (2026-11-29): every redis subtest failed, Flush
// returning its ctx's end after 3s. Now it returns once the event was
// handed to its handler and nacked.
func TestFlushDoesNotWaitForNackedRedelivery(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	backends := map[string]func(t *testing.T) pubsub.PubSub{
		"redis": func(t *testing.T) pubsub.PubSub { return urlBackend(t, srv.URL(), Options{}) },
		"inmem": func(t *testing.T) pubsub.PubSub { b := inmem.New(); t.Cleanup(func() { b.Close() }); return b },
	}
	for name, mk := range backends {
		for _, opts := range []struct {
			name string
			o    []pubsub.SubscribeOption
		}{
			{"fanout-c1", nil},
			{"fanout-c4", []pubsub.SubscribeOption{pubsub.Concurrency(4)}},
			{"group-c1", []pubsub.SubscribeOption{pubsub.Group("g")}},
			{"group-c4", []pubsub.SubscribeOption{pubsub.Group("g"), pubsub.Concurrency(4)}},
		} {
			t.Run(name+"/"+opts.name, func(t *testing.T) {
				ps := mk(t)
				ctx := context.Background()
				called := make(chan struct{}, 100)
				o := append([]pubsub.SubscribeOption{pubsub.RedeliveryDelay(time.Second), pubsub.RedeliveryCap(time.Second)}, opts.o...)
				sub, err := ps.Subscribe(ctx, "t", func(ctx context.Context, e pubsub.Event) error {
					called <- struct{}{}
					return errors.New("nack")
				}, o...)
				if err != nil {
					t.Fatal(err)
				}
				defer sub.Unsubscribe(ctx)
				if err := ps.Publish(ctx, "t", pubsub.Event{Type: "x"}); err != nil {
					t.Fatal(err)
				}
				fctx, cancel := context.WithTimeout(ctx, 3*time.Second)
				defer cancel()
				start := time.Now()
				err = ps.Flush(fctx)
				t.Logf("Flush = %v after %v, handler calls %d", err, time.Since(start).Round(time.Millisecond), len(called))
				if err != nil {
					t.Errorf("Flush with a handler that nacks: %v after %v", err, time.Since(start).Round(time.Millisecond))
				}
				if len(called) == 0 {
					t.Errorf("Flush returned %v before the handler was called", err)
				}
			})
		}
	}
}
