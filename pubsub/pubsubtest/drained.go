package pubsubtest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasebus/leasebus/pubsub"
)

// RunDrainedDeleter checks a pubsub.DrainedDeleter: bad input; a topic that
// does not exist counts as deleted; a topic is kept while its group has an
// event not yet delivered or delivered and not acked, or while another group
// exists; it is deleted once its group acked everything; and an event
// published after the deletion reaches a new subscription of the group that
// starts from Earliest. newPS returns a fresh PubSub (closed by the caller's
// cleanup).
func RunDrainedDeleter(t *testing.T, newPS func(t *testing.T) pubsub.PubSub) {
	t.Helper()
	ps := newPS(t)
	dd, ok := ps.(pubsub.DrainedDeleter)
	if !ok {
		t.Skipf("%T does not implement pubsub.DrainedDeleter", ps)
	}
	ctx := t.Context()
	if _, err := dd.DeleteTopicIfDrained(ctx, "", "g"); !errors.Is(err, pubsub.ErrInvalid) {
		t.Errorf("DeleteTopicIfDrained with an empty topic = %v, want ErrInvalid", err)
	}
	if _, err := dd.DeleteTopicIfDrained(ctx, "t", ""); !errors.Is(err, pubsub.ErrInvalid) {
		t.Errorf("DeleteTopicIfDrained with an empty group = %v, want ErrInvalid", err)
	}
	if gone, err := dd.DeleteTopicIfDrained(ctx, "drained.none", "g"); err != nil || !gone {
		t.Fatalf("DeleteTopicIfDrained of an unknown topic = %v, %v; want true", gone, err)
	}
	deleted := func(topic string, want bool) {
		t.Helper()
		gone, err := dd.DeleteTopicIfDrained(ctx, topic, "g")
		if err != nil || gone != want {
			t.Fatalf("DeleteTopicIfDrained(%q) = %v, %v; want %v", topic, gone, err, want)
		}
	}
	publish := func(topic, typ string) {
		t.Helper()
		if err := ps.Publish(ctx, topic, pubsub.Event{Type: typ}); err != nil {
			t.Fatal(err)
		}
	}
	const topic = "drained.t"
	publish(topic, "first")
	deleted(topic, false) // no group yet, one event nobody read

	got := make(chan string, 10)
	release := make(chan struct{})
	sub, err := ps.Subscribe(ctx, topic, func(ctx context.Context, e pubsub.Event) error {
		got <- e.Type
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}, pubsub.Group("g"), pubsub.StartFrom(pubsub.Earliest))
	if err != nil {
		t.Fatal(err)
	}
	waitType(t, got, "first")
	deleted(topic, false) // delivered, not acked
	close(release)
	waitDrained(t, dd, topic)
	if err := sub.Unsubscribe(ctx); err != nil {
		t.Fatal(err)
	}

	// Published after the deletion: a new subscription of the group that
	// starts from Earliest reads it.
	publish(topic, "after")
	got2 := make(chan string, 10)
	sub2, err := ps.Subscribe(ctx, topic, func(_ context.Context, e pubsub.Event) error {
		got2 <- e.Type
		return nil
	}, pubsub.Group("g"), pubsub.StartFrom(pubsub.Earliest))
	if err != nil {
		t.Fatal(err)
	}
	waitType(t, got2, "after")
	if err := sub2.Unsubscribe(ctx); err != nil {
		t.Fatal(err)
	}

	// Another group keeps the topic.
	const other = "drained.other"
	publish(other, "x")
	sub3, err := ps.Subscribe(ctx, other, func(context.Context, pubsub.Event) error { return nil },
		pubsub.Group("h"), pubsub.StartFrom(pubsub.Earliest))
	if err != nil {
		t.Fatal(err)
	}
	defer sub3.Unsubscribe(context.Background())
	deleted(other, false)
}

func waitType(t *testing.T, got <-chan string, want string) {
	t.Helper()
	select {
	case typ := <-got:
		if typ != want {
			t.Fatalf("delivered %q, want %q", typ, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%q not delivered within 10s", want)
	}
}

// waitDrained calls DeleteTopicIfDrained until it deletes topic: an ack may
// reach the backend a moment after the handler returned.
func waitDrained(t *testing.T, dd pubsub.DrainedDeleter, topic string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		gone, err := dd.DeleteTopicIfDrained(t.Context(), topic, "g")
		if err != nil {
			t.Fatal(err)
		}
		if gone {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%q not deleted 10s after its only group acked everything", topic)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
