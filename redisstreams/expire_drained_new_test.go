package redisstreams

import (
	"context"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// TestExpireWhenDrainedNewStreamExpires: a pubsub.ExpireWhenDrained group
// subscription to a topic with no stream yet creates the stream with its
// group (XGROUP CREATE ... MKSTREAM): empty and drained, but with no
// expiry, since only an ack sets one. A subscriber that ends without
// deleting it (a killed process; here an Unsubscribe, which does not
// delete topics either) left it for ever, a key without a lifetime
// (review h63).
func TestExpireWhenDrainedNewStreamExpires(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	c := srv.Client(t)
	b := psBackend(t, c, Options{})
	ctx := context.Background()
	const ttl = 300 * time.Millisecond
	key := b.keys.Stream("fresh")
	sub, err := b.Subscribe(ctx, "fresh", func(ctx context.Context, ev pubsub.Event) error { return nil },
		pubsub.Group("owner"), pubsub.StartFrom(pubsub.Earliest), pubsub.ExpireWhenDrained(ttl))
	if err != nil {
		t.Fatal(err)
	}
	if c.Exists(ctx, key).Val() == 0 {
		t.Skip("Subscribe created no stream")
	}
	if err := sub.Unsubscribe(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * ttl)
	if c.Exists(ctx, key).Val() == 1 {
		t.Fatalf("stream %s left with PTTL %v %v after its ExpireWhenDrained(%v) subscriber ended; it never had an event",
			key, c.PTTL(ctx, key).Val(), 3*ttl, ttl)
	}
}
