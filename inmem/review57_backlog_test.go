package inmem

import (
	"context"
	"testing"
	"time"

	"github.com/leasebus/leasebus/pubsub"
)

// TestReview57GroupBacklogCountsClaimedDeliveries: pubsub.Backlog.Pending
// "counts events delivered to a member of the group and not yet acked"
// (pubsub/backlog.go). A ClaimPending member takes over two deliveries
// another member holds unacked and starts the first; the second waits in
// the claimer's queue, delivered and unacked all the same. inmem's
// GroupBacklog counts only r.pending and r.retries, not a claimer's queue,
// so it reports Pending 1 with Lag 0: the group looks as if one event were
// left when two are (redisstreams counts both: they are in its PEL).
func TestReview57GroupBacklogCountsClaimedDeliveries(t *testing.T) {
	b := New()
	defer b.Close()
	ctx := context.Background()
	const topic = "review57-backlog"

	startedA := make(chan struct{}, 2)
	a := mustSubscribe(t, b, topic, func(ctx context.Context, e pubsub.Event) error {
		startedA <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	}, pubsub.Group("g"), pubsub.Concurrency(2), pubsub.AckDeadline(time.Minute))
	mustPublish(t, b, topic, pubsub.Event{Type: "one"})
	mustPublish(t, b, topic, pubsub.Event{Type: "two"})
	waitFor(t, startedA, "member A to start event one")
	waitFor(t, startedA, "member A to start event two")

	startedB := make(chan string, 2)
	release := make(chan struct{})
	bsub := mustSubscribe(t, b, topic, func(_ context.Context, e pubsub.Event) error {
		startedB <- e.Type
		<-release
		return nil
	}, pubsub.Group("g"), pubsub.ClaimPending(), pubsub.AckDeadline(time.Minute))
	if got := waitFor(t, startedB, "member B to start its first claimed event"); got != "one" {
		t.Fatalf("B started %q first, want one", got)
	}

	bl, err := b.GroupBacklog(ctx, topic, "g")
	if err != nil {
		t.Fatal(err)
	}
	if bl.Pending != 2 || bl.Lag != 0 {
		t.Errorf("GroupBacklog = Pending %d, Lag %d; want Pending 2 (one running on B, one claimed by B and not yet started), Lag 0", bl.Pending, bl.Lag)
	}
	close(release)
	if err := a.Unsubscribe(ctx); err != nil {
		t.Fatal(err)
	}
	if got := waitFor(t, startedB, "member B to start event two"); got != "two" {
		t.Fatalf("B started %q second, want two", got)
	}
	mustFlush(t, b)
	if err := bsub.Unsubscribe(ctx); err != nil {
		t.Fatal(err)
	}
}
