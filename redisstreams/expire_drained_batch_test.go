package redisstreams

import (
	"context"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// TestExpireWhenDrainedBatchCancels: a PublishBatch publication with Group
// cancels a drained stream's expiry (pubsub.ExpireWhenDrained) as PublishFor
// does, in the one-pipeline path and, on Cluster with the topics in other
// slots, one publication after the other; with StreamIdleTTL the stream
// then has the idle expiry, not the drained one (review h62: held).
func TestExpireWhenDrainedBatchCancels(t *testing.T) {
	redistest.ForEachDeployment(t, func(t *testing.T, d *redistest.Deployed) {
		const (
			ttl   = 300 * time.Millisecond
			idle  = time.Hour
			group = "owner"
		)
		c := d.NewClient(t)
		b := psBackend(t, c, Options{StreamIdleTTL: idle})
		ctx := context.Background()
		got := make(chan string, 16)
		hold := make(chan struct{}, 16) // a b* entry's handler returns (acks) only when told
		sub, err := b.Subscribe(ctx, "inbox", func(ctx context.Context, ev pubsub.Event) error {
			got <- ev.ID
			if ev.ID != "e1" {
				select {
				case <-hold:
				case <-ctx.Done():
				}
			}
			return nil
		}, pubsub.Group(group), pubsub.StartFrom(pubsub.Earliest), pubsub.ExpireWhenDrained(ttl))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			close(hold)
			_ = sub.Unsubscribe(context.Background())
		})
		key := b.keys.Stream("inbox")
		expect := func(id string) {
			t.Helper()
			select {
			case g := <-got:
				if g != id {
					t.Fatalf("delivered %q, want %q", g, id)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("%q not delivered within 10s", id)
			}
		}
		drainedTTL := func() {
			t.Helper()
			for deadline := time.Now().Add(10 * time.Second); ; {
				if v := c.PTTL(ctx, key).Val(); v > 0 && v <= ttl {
					return
				}
				if time.Now().After(deadline) {
					t.Fatalf("no drained expiry: PTTL %v", c.PTTL(ctx, key).Val())
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
		if err := b.PublishFor(ctx, "inbox", group, pubsub.Event{ID: "e1", Type: "t"}); err != nil {
			t.Fatal(err)
		}
		expect("e1")
		drainedTTL()
		for i, other := range []string{"inbox", "elsewhere"} {
			id := []string{"b1", "b2"}[i]
			if err := b.PublishBatch(ctx, []pubsub.Publication{
				{Topic: "inbox", Group: group, Event: pubsub.Event{ID: id, Type: "t"}},
				{Topic: other + "-notice", Event: pubsub.Event{Type: "n"}},
			}); err != nil {
				t.Fatal(err)
			}
			if v := c.PTTL(ctx, key).Val(); v > 0 && v <= ttl {
				t.Fatalf("PTTL %v after PublishBatch with Group (%s): the drained expiry was kept", v, other)
			}
			expect(id)
			if v := c.PTTL(ctx, key).Val(); v <= ttl {
				t.Fatalf("PTTL %v with %s pending, want the idle expiry %v", v, id, idle)
			}
			hold <- struct{}{}
			drainedTTL()
		}
	})
}
