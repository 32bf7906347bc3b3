package inmem

import (
	"context"
	"testing"
	"time"

	"github.com/leasebus/leasebus/pubsub"
)

// TestReview57DeleteTopicDropsClaimedDeliveries: DeleteTopic removes a
// topic's "groups, with their positions and unacked deliveries ... a
// group with members skip[s] every event published before it, a delivery
// in flight finishes, and an unacked one is not delivered again"
// (inmem/retention.go). forgetPast clears the group's pending deliveries and
// redeliveries but not the queue of a ClaimPending member: a delivery it
// claimed and had not started is delivered after DeleteTopic.
func TestReview57DeleteTopicDropsClaimedDeliveries(t *testing.T) {
	b := New()
	defer b.Close()
	ctx := context.Background()
	const topic = "review57-delete"

	startedA := make(chan struct{}, 2)
	a := mustSubscribe(t, b, topic, func(ctx context.Context, e pubsub.Event) error {
		startedA <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	}, pubsub.Group("g"), pubsub.Concurrency(2), pubsub.AckDeadline(time.Minute))
	defer a.Unsubscribe(ctx)
	mustPublish(t, b, topic, pubsub.Event{Type: "one"})
	mustPublish(t, b, topic, pubsub.Event{Type: "two"})
	waitFor(t, startedA, "member A to start event one")
	waitFor(t, startedA, "member A to start event two")

	startedB := make(chan string, 4)
	release := make(chan struct{})
	bsub := mustSubscribe(t, b, topic, func(_ context.Context, e pubsub.Event) error {
		startedB <- e.Type
		<-release
		return nil
	}, pubsub.Group("g"), pubsub.ClaimPending(), pubsub.AckDeadline(time.Minute))
	defer bsub.Unsubscribe(ctx)
	if got := waitFor(t, startedB, "member B to start its first claimed event"); got != "one" {
		t.Fatalf("B started %q first, want one", got)
	}

	if err := b.DeleteTopic(ctx, topic); err != nil {
		t.Fatal(err)
	}
	close(release) // B's delivery in flight finishes
	mustPublish(t, b, topic, pubsub.Event{Type: "after"})
	// B handles one event at a time in order: what it starts next is
	// either the claimed "two" (the bug) or "after".
	if got := waitFor(t, startedB, "member B's next event"); got != "after" {
		t.Errorf("after DeleteTopic member B got %q, an unacked delivery of the deleted topic; want only %q", got, "after")
	}
}
