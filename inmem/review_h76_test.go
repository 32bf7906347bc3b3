package inmem

import (
	"context"
	"errors"
	"testing"

	"github.com/leasebus/leasebus/pubsub"
)

// TestReviewH76DeleteTopicFanoutInFlightNackNotRedelivered: DeleteTopic
// promises "a delivery in flight finishes, and an unacked one is not
// delivered again" (pubsub.TopicDeleter, inmem's DeleteTopic). For a group
// that holds (its pending deliveries are marked done), but a fan-out
// subscription's delivery in flight is not pending anywhere: when its
// handler nacks after the deletion, it is queued for redelivery and runs
// again.
func TestReviewH76DeleteTopicFanoutInFlightNackNotRedelivered(t *testing.T) {
	b := New()
	defer b.Close()
	ctx := context.Background()
	const topic = "review-h76-delete-fanout"

	started := make(chan string, 8)
	release := make(chan struct{})
	sub := mustSubscribe(t, b, topic, func(_ context.Context, e pubsub.Event) error {
		select {
		case started <- e.Type:
		default:
		}
		if e.Type == "before" && e.DeliveryAttempt == 1 {
			<-release
			return errors.New("nack")
		}
		return nil // a redelivery is acked, so the bug does not spin
	}, pubsub.RedeliveryDelay(0))
	defer sub.Unsubscribe(ctx)

	mustPublish(t, b, topic, pubsub.Event{Type: "before"})
	if got := waitFor(t, started, "the fan-out delivery of before"); got != "before" {
		t.Fatalf("started %q, want before", got)
	}
	if err := b.DeleteTopic(ctx, topic); err != nil {
		t.Fatal(err)
	}
	close(release) // the delivery in flight finishes, unacked
	mustPublish(t, b, topic, pubsub.Event{Type: "after"})
	// One event at a time, redeliveries first: the next start is either the
	// redelivered "before" (the bug) or "after".
	if got := waitFor(t, started, "the subscription's next event"); got != "after" {
		t.Errorf("after DeleteTopic the fan-out subscription got %q again, an unacked delivery of the deleted topic; want only %q", got, "after")
	}
}
