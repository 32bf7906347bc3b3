package redisstreams

import (
	"context"
	"testing"
	"time"

	"github.com/leasebus/leasebus/pubsub"
)

// TestSubscribeAfterReaderRetiredUnderIt: a fan-out Subscribe finds the
// shared reader, then the reader's last subscription leaves and retires it
// (its node reader's loop is over) before the new subscription attaches. The new
// subscription must go to a new reader (and get events), not to the
// stopped one.
func TestSubscribeAfterReaderRetiredUnderIt(t *testing.T) {
	_, b := startURLBackend(t)
	ctx := context.Background()
	nop := func(context.Context, pubsub.Event) error { return nil }
	first, err := b.Subscribe(ctx, "t", nop)
	if err != nil {
		t.Fatal(err)
	}
	old := first.(*fanSub).r.node.Load() // on NewURL, the reader's node reader serves it alone
	hits := 0
	hook := func() {
		hits++
		if hits == 1 {
			if err := first.Unsubscribe(ctx); err != nil {
				t.Error(err)
			}
			select { // the retired reader's loop is over
			case <-old.done:
			case <-time.After(10 * time.Second):
				t.Error("the reader did not stop within 10s of its last subscription leaving")
			}
		}
	}
	testReaderFound.Store(&hook)
	t.Cleanup(func() { testReaderFound.Store(nil) })
	got := make(chan struct{}, 1)
	sub, err := b.Subscribe(ctx, "t", func(context.Context, pubsub.Event) error {
		select {
		case got <- struct{}{}:
		default:
		}
		return nil
	})
	testReaderFound.Store(nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe(context.Background()) })
	if hits != 1 {
		t.Fatalf("the hook ran %d times, want 1", hits)
	}
	if err := b.Publish(ctx, "t", pubsub.Event{Type: "x"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("a subscription attached while its reader retired got nothing within 10s")
	}
}
