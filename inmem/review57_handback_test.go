package inmem

import (
	"context"
	"testing"
	"time"

	"github.com/leasebus/leasebus/pubsub"
)

// TestReview57UnsubscribeHandsBackOnlyAfterHandlerReturned: package pubsub's
// "Groups" rule says a member that stops gives its events back to the group
// "once its handlers have returned" (redisstreams waits for its handlers
// before its cleanup hands anything back). inmem's stop queues a delivery
// whose handler is still running (its ctx cancelled, the handler finishing
// its work) for the other members at once: a second live member runs the
// event while the first handler still runs it, and the first handler's ack
// then makes that a second run of an event nothing failed.
func TestReview57UnsubscribeHandsBackOnlyAfterHandlerReturned(t *testing.T) {
	b := New()
	defer b.Close()
	const topic = "review57-handback"

	started := make(chan struct{})
	cancelled := make(chan struct{})
	release := make(chan struct{})
	a := mustSubscribe(t, b, topic, func(ctx context.Context, e pubsub.Event) error {
		close(started)
		<-ctx.Done() // Unsubscribe began
		close(cancelled)
		<-release // finishes its work, then acks
		return nil
	}, pubsub.Group("g"), pubsub.AckDeadline(time.Minute))
	mustPublish(t, b, topic, pubsub.Event{Type: "work"})
	waitFor(t, started, "member A to start the event")

	gotB := make(chan pubsub.Event, 4)
	bsub := mustSubscribe(t, b, topic, func(_ context.Context, e pubsub.Event) error {
		gotB <- e
		return nil
	}, pubsub.Group("g"), pubsub.AckDeadline(time.Minute))
	defer bsub.Unsubscribe(context.Background())

	unsubbed := make(chan error, 1)
	go func() { unsubbed <- a.Unsubscribe(context.Background()) }()
	waitFor(t, cancelled, "member A's handler ctx to end")

	// A's handler is still running: the event must not go to B now. On the
	// broken backend B gets it within milliseconds; two seconds is generous.
	select {
	case e := <-gotB:
		t.Errorf("member B got event %s (attempt %d) while member A's handler was still running it", e.ID, e.DeliveryAttempt)
	case <-time.After(2 * time.Second):
	}
	close(release)
	if err := waitFor(t, unsubbed, "A's Unsubscribe"); err != nil {
		t.Fatalf("Unsubscribe: %v", err)
	}
	mustFlush(t, b)
	select {
	case e := <-gotB:
		t.Errorf("member B got event %s (attempt %d) that member A's handler acked", e.ID, e.DeliveryAttempt)
	default:
	}
}
