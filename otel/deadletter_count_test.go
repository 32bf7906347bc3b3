package leasebusotel_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/leasebus/leasebus/inmem"
	"github.com/leasebus/leasebus/pubsub"
)

// TestFailureAsItStopsIsNotDeadLettered: a handler that fails on its last
// allowed attempt because its subscription is stopping is not dead-lettered
// (pubsub.Policy: "A failed attempt whose ctx has ended is never
// dead-lettered"; the event goes back to its group), so the wrapper counts
// a nack and no dead letter. Before, it counted one (review h60 noticed).
func TestFailureAsItStopsIsNotDeadLettered(t *testing.T) {
	tm := newTelemetry(t)
	b := inmem.New()
	defer b.Close()
	bus := tm.in.Wrap(b)
	started := make(chan struct{})
	sub, err := bus.Subscribe(context.Background(), "p", func(ctx context.Context, e pubsub.Event) error {
		close(started)
		<-ctx.Done()
		return ctx.Err()
	}, pubsub.Group("g"), pubsub.MaxDeliveries(1))
	if err != nil {
		t.Fatal(err)
	}
	if err := bus.Publish(context.Background(), "p", pubsub.Event{Type: "x"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the handler never started")
	}
	if err := sub.Unsubscribe(context.Background()); err != nil {
		t.Fatal(err)
	}
	topic := attribute.String("leasebus.topic", "p")
	if n := tm.sum(t, "leasebus.events.nacked", topic); n != 1 {
		t.Errorf("nacked = %d, want 1", n)
	}
	if n := tm.sum(t, "leasebus.events.dead_lettered", topic); n != 0 {
		t.Errorf("dead_lettered = %d, want 0: the attempt failed as its subscription stopped, and went back to the group", n)
	}
	if bl, err := b.GroupBacklog(context.Background(), "p", "g"); err != nil || bl.Pending+bl.Lag == 0 {
		t.Errorf("GroupBacklog = %+v, %v: want the event back in the group", bl, err)
	}
}
