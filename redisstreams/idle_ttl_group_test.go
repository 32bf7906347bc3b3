package redisstreams

import (
	"context"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// TestStreamIdleTTLKeptByNewGroup: a stream a publisher set to expire when
// idle (its Options.StreamIdleTTL) keeps that expiry when a group
// subscription of a process without StreamIdleTTL creates its group on it.
// create_group.lua took back any expiry a stream had at a group's creation
// (PERSIST without StreamIdleTTL), to undo a drained expiry
// (pubsub.ExpireWhenDrained): it removed the idle expiry as well, and the
// stream, seeing no further publish, was then kept for ever (before it, a
// plain XGROUP CREATE left the expiry alone).
func TestStreamIdleTTLKeptByNewGroup(t *testing.T) {
	for _, start := range []pubsub.Position{pubsub.Latest, pubsub.Earliest} {
		t.Run(map[pubsub.Position]string{pubsub.Latest: "Latest", pubsub.Earliest: "Earliest"}[start], func(t *testing.T) {
			srv := redistest.Start(t, redistest.Options{})
			c := srv.Client(t)
			prefix := psPrefix()
			const idle = 400 * time.Millisecond
			pub := psBackend(t, c, Options{Prefix: prefix, StreamIdleTTL: idle})
			subB := psBackend(t, c, Options{Prefix: prefix})
			ctx := context.Background()
			key := pub.keys.Stream("jobs")
			if err := pub.Publish(ctx, "jobs", pubsub.Event{ID: "e1", Type: "t"}); err != nil {
				t.Fatal(err)
			}
			if ttl := c.PTTL(ctx, key).Val(); ttl <= 0 {
				t.Fatalf("PTTL after the publish: %v, want the idle expiry", ttl)
			}
			sub, err := subB.Subscribe(ctx, "jobs", func(ctx context.Context, ev pubsub.Event) error { return nil },
				pubsub.Group("g"), pubsub.StartFrom(start))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = sub.Unsubscribe(context.Background()) })
			if ttl := c.PTTL(ctx, key).Val(); ttl <= 0 {
				t.Errorf("PTTL after the group's creation: %v: the idle expiry was removed", ttl)
			}
			for deadline := time.Now().Add(5 * idle); c.Exists(ctx, key).Val() == 1; {
				if time.Now().After(deadline) {
					t.Fatalf("stream still there %v after its last publish (StreamIdleTTL %v); PTTL %v",
						5*idle, idle, c.PTTL(ctx, key).Val())
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}
