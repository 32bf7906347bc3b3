package redisstreams

import (
	"context"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// TestFlushKicksReadOnDemand: Flush after a Publish on a topic with a
// local ReadOnDemand group subscription that nobody kicked returns once the
// event was handled. Found by review: it never returned (the group never
// delivered the event without a Kick).
func TestFlushKicksReadOnDemand(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t, redistest.Options{})
	b := psBackend(t, srv.Client(t), Options{})
	ctx := context.Background()
	handled := make(chan struct{}, 1)
	sub, err := b.Subscribe(ctx, "t", func(ctx context.Context, e pubsub.Event) error { handled <- struct{}{}; return nil },
		pubsub.Group("g"), pubsub.ReadOnDemand())
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe(ctx)
	// Let the read it makes as it starts find nothing (if it came later it
	// would read the event and the test would pass without a kick).
	time.Sleep(100 * time.Millisecond)
	if err := b.Publish(ctx, "t", pubsub.Event{Type: "x"}); err != nil {
		t.Fatal(err)
	}
	fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := b.Flush(fctx); err != nil {
		t.Fatalf("Flush = %v (blocked 5s; with Background it never returns)", err)
	}
	select {
	case <-handled:
	default:
		t.Fatal("Flush returned before the event was handled")
	}
}
