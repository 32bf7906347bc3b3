package inmem

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasebus/leasebus/pubsub"
)

// TestReview57NackWaitsRedeliveryDelayNotAckDeadline: a nacked event "waits
// RedeliveryDelay (10ms by default, doubling per attempt up to 1s ...)
// before it is delivered again" (pubsub/doc.go, "Delivery policy"). Member
// A's handler hangs on an event; member B takes the event over with
// ClaimPending and nacks it. inmem's settle takes B's failure for
// "superseded" because A, an older attempt, still holds the event, and
// leaves it pending under B's AckDeadline: B gets it again only when that
// deadline runs out (a minute here), not after B's RedeliveryDelay
// (redisstreams redelivers it to B after the delay: the same test there
// passes in 0.05s). The same happens when B took the event over after A's
// AckDeadline ran out. The bound below, 10s, is a thousand times the delay.
func TestReview57NackWaitsRedeliveryDelayNotAckDeadline(t *testing.T) {
	for _, tc := range []struct {
		name  string
		aDead time.Duration // A's AckDeadline
		bOpts []pubsub.SubscribeOption
	}{
		{"ClaimPending", time.Minute, []pubsub.SubscribeOption{pubsub.ClaimPending()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := New()
			defer b.Close()
			const topic = "review57-nack"
			started := make(chan struct{}, 1)
			a := mustSubscribe(t, b, topic, func(ctx context.Context, e pubsub.Event) error {
				started <- struct{}{}
				<-ctx.Done() // hangs until A is unsubscribed
				return ctx.Err()
			}, pubsub.Group("g"), pubsub.AckDeadline(tc.aDead))
			defer a.Unsubscribe(context.Background())
			mustPublish(t, b, topic, pubsub.Event{Type: "work"})
			waitFor(t, started, "member A to start the event")

			attempts := make(chan int, 8)
			var calls atomic.Int32
			opts := append([]pubsub.SubscribeOption{pubsub.Group("g"), pubsub.AckDeadline(time.Minute),
				pubsub.RedeliveryDelay(10 * time.Millisecond)}, tc.bOpts...)
			bsub := mustSubscribe(t, b, topic, func(_ context.Context, e pubsub.Event) error {
				attempts <- e.DeliveryAttempt
				if calls.Add(1) == 1 {
					return errors.New("first try on B fails")
				}
				return nil
			}, opts...)
			defer bsub.Unsubscribe(context.Background())

			first := waitFor(t, attempts, "member B's first attempt")
			select {
			case again := <-attempts:
				if again != first+1 {
					t.Errorf("B's redelivery is attempt %d, want %d", again, first+1)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("B nacked attempt %d with RedeliveryDelay 10ms and got no redelivery within 10s (its AckDeadline is a minute)", first)
			}
		})
	}
}
