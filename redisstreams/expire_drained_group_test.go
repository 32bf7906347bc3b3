package redisstreams

import (
	"context"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// TestExpireWhenDrainedSecondGroupKeeps: a drained stream's expiry
// (pubsub.ExpireWhenDrained) was checked only when it was set, when its
// group was the only one. A group subscribed afterwards from the start of
// the stream (StartFrom(Earliest)) was given the entries the stream still
// retained, and the expiry then deleted the stream with them pending in
// the new group, unacked: published events lost to a subscriber that had
// not finished them (review h62). Now a group's creation on a stream
// removes its expiry, as a PublishFor does: the stream is no longer drained
// by the condition the expiry was set on.
func TestExpireWhenDrainedSecondGroupKeeps(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	c := srv.Client(t)
	b := psBackend(t, c, Options{})
	ctx := context.Background()
	const ttl = 300 * time.Millisecond
	key := b.keys.Stream("jobs")
	acked := make(chan string, 4)
	sub, err := b.Subscribe(ctx, "jobs", func(ctx context.Context, ev pubsub.Event) error {
		acked <- ev.ID
		return nil
	}, pubsub.Group("owner"), pubsub.StartFrom(pubsub.Earliest), pubsub.ExpireWhenDrained(ttl))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe(context.Background()) })
	if err := b.PublishFor(ctx, "jobs", "owner", pubsub.Event{ID: "e1", Type: "t"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-acked:
	case <-time.After(10 * time.Second):
		t.Fatal("e1 not delivered within 10s")
	}
	for deadline := time.Now().Add(10 * time.Second); c.PTTL(ctx, key).Val() <= 0; {
		if time.Now().After(deadline) {
			t.Fatal("no expiry set by the draining ack")
		}
		time.Sleep(5 * time.Millisecond)
	}

	// A second group, from the start: it is given e1 and holds it.
	got := make(chan string, 4)
	hold := make(chan struct{})
	audit, err := b.Subscribe(ctx, "jobs", func(ctx context.Context, ev pubsub.Event) error {
		got <- ev.ID
		select {
		case <-hold:
		case <-ctx.Done():
		}
		return nil
	}, pubsub.Group("audit"), pubsub.StartFrom(pubsub.Earliest))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = audit.Unsubscribe(context.Background()) })
	t.Cleanup(func() { close(hold) }) // before the Unsubscribe (run last)
	select {
	case id := <-got:
		if id != "e1" {
			t.Fatalf("audit got %q, want e1", id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("e1 not delivered to the second group within 10s")
	}
	time.Sleep(3 * ttl)
	n, err := c.Exists(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatalf("stream deleted by the expiry with e1 pending in group audit (PTTL was set when owner drained it)")
	}
	p, err := c.XPending(ctx, key, "audit").Result()
	if err != nil || p.Count != 1 {
		t.Fatalf("audit's pending: %v, %v; want e1 pending", p, err)
	}
}
