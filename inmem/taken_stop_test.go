package inmem

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasebus/leasebus/pubsub"
)

// TestJobTakenAsStopIsNotAnAttempt: a member's worker takes an event just
// as the member's Unsubscribe begins (a test hook holds it there until the
// ctx is cancelled). The handler must not run with the already-cancelled
// ctx, and the event must go back as the same attempt, as redisstreams
// hands back what it read and did not start: with MaxDeliveries(1) the
// next member runs it, where it was dead-lettered without a run (review
// h58 noticed).
func TestJobTakenAsStopIsNotAnAttempt(t *testing.T) {
	b := New()
	defer b.Close()
	ctx := context.Background()
	var aRuns atomic.Int32
	a, err := b.Subscribe(ctx, "t", func(hctx context.Context, _ pubsub.Event) error {
		aRuns.Add(1)
		return hctx.Err() // a handler that honours its ctx
	}, pubsub.Group("g"), pubsub.MaxDeliveries(1))
	if err != nil {
		t.Fatal(err)
	}
	as := a.(*subscription)
	taken := make(chan struct{})
	hook := func(s *subscription) {
		if s == as {
			close(taken)
			<-s.ctx.Done()
		}
	}
	testHookTaken.Store(&hook)
	defer testHookTaken.Store(nil)
	if err := b.Publish(ctx, "t", pubsub.Event{ID: "e1", Type: "x"}); err != nil {
		t.Fatal(err)
	}
	<-taken
	if err := a.Unsubscribe(ctx); err != nil {
		t.Fatal(err)
	}
	got := make(chan pubsub.Event, 2)
	dead := make(chan pubsub.Event, 2)
	if _, err := b.Subscribe(ctx, pubsub.DeadLetterTopic("t"), func(_ context.Context, e pubsub.Event) error {
		dead <- e
		return nil
	}, pubsub.StartFrom(pubsub.Earliest)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Subscribe(ctx, "t", func(_ context.Context, e pubsub.Event) error {
		got <- e
		return nil
	}, pubsub.Group("g"), pubsub.MaxDeliveries(1)); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-got:
		if e.DeliveryAttempt != 1 {
			t.Errorf("the next member got the event as attempt %d, want 1 (the stopped member never started it)", e.DeliveryAttempt)
		}
	case e := <-dead:
		t.Fatalf("the event went to the dead-letter topic (%s) without a run", e.Metadata[pubsub.MetaDeadReason])
	case <-time.After(10 * time.Second):
		t.Fatal("the next member did not get the event within 10s")
	}
	if n := aRuns.Load(); n != 0 {
		t.Errorf("the stopping member's handler ran %d times with its ctx already cancelled", n)
	}
}
