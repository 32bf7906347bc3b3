package redisstreams

import (
	"context"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// TestHandBackLeavesNoConsumer: an Unsubscribe that hands back prefetched
// entries keeps its consumer (it holds them, XCLAIM ... IDLE); once another
// member took them over, that member deletes the consumer, which holds
// nothing any more. (Before, nothing did: one consumer left per such
// Unsubscribe, forever, on a long-lived topic.)
func TestHandBackLeavesNoConsumer(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t, redistest.Options{})
	c := srv.Client(t)
	b := psBackend(t, c, Options{})
	ctx := context.Background()
	key := b.keys.Stream("tp")
	started := make(chan struct{}, 1)
	block := func(ctx context.Context, e pubsub.Event) error {
		select {
		case started <- struct{}{}:
		default:
		}
		<-ctx.Done()
		return ctx.Err()
	}
	subA, err := b.Subscribe(ctx, "tp", block, pubsub.Group("g"), pubsub.StartFrom(pubsub.Earliest))
	if err != nil {
		t.Fatal(err)
	}
	consumerA := subA.(*groupSub).consumer
	for range 5 {
		if err := b.Publish(ctx, "tp", pubsub.Event{Type: "t"}); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-started:
	case <-time.After(5 * time.Second):
		t.Fatal("handler not started")
	}
	time.Sleep(100 * time.Millisecond) // the rest is prefetched
	if err := subA.Unsubscribe(ctx); err != nil {
		t.Fatal(err)
	}
	got := make(chan struct{}, 8)
	sub2, err := b.Subscribe(ctx, "tp", func(ctx context.Context, e pubsub.Event) error { got <- struct{}{}; return nil },
		pubsub.Group("g"), pubsub.ClaimPending())
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		select {
		case <-got:
		case <-time.After(5 * time.Second):
			t.Fatal("successor did not get all 5")
		}
	}
	if err := sub2.Unsubscribe(ctx); err != nil {
		t.Fatal(err)
	}
	noConsumer(t, c, key, "g", consumerA)
}
