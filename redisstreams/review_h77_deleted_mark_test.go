package redisstreams

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// TestReviewH77FanoutRetryAfterDeletedMarkWithLowerIDs: a fan-out
// subscription remembers the highest id its Backend's DeleteTopic removed
// and never retries an entry up to it ("a stream made again numbers its
// entries above it"). That holds while the server's clock is past that id.
// Here the stream's last entry came from a server whose clock ran ahead (a
// failover since; XADD with an explicit id stands in for it): DeleteTopic
// keeps the stream emptied, then the stream goes (a restart without data,
// StreamIdleTTL; DEL stands in) and is made again by a publish numbered
// from the server's clock, below the mark. The subscription reads the new
// event; when its handler fails, the event must be delivered again (its
// policy's retries), not dropped as deleted.
func TestReviewH77FanoutRetryAfterDeletedMarkWithLowerIDs(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t, redistest.Options{})
	b := urlBackend(t, srv.URL(), Options{})
	raw := srv.Client(t)
	ctx := t.Context()
	const topic = "lower"
	key := b.keys.Stream(topic)
	attempts := make(chan int, 16)
	ahead := make(chan struct{}, 1)
	sub, err := b.Subscribe(ctx, topic, func(_ context.Context, e pubsub.Event) error {
		switch e.Type {
		case "ahead":
			ahead <- struct{}{}
			return nil
		case "after":
			attempts <- e.DeliveryAttempt
			if e.DeliveryAttempt == 1 {
				return errors.New("nack")
			}
		}
		return nil
	}, pubsub.RedeliveryDelay(0))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe(context.Background())
	// An entry the subscription reads, numbered a minute ahead of the
	// server's clock: written like Publish writes, with an explicit id.
	if err := b.Publish(ctx, topic, pubsub.Event{Type: "setup"}); err != nil {
		t.Fatal(err)
	}
	entries, err := raw.XRange(ctx, key, "-", "+").Result()
	if err != nil || len(entries) != 1 {
		t.Fatalf("xrange: %v, %v", entries, err)
	}
	vals := entries[0].Values
	vals["type"] = "ahead"
	future := fmt.Sprintf("%d-0", time.Now().Add(time.Minute).UnixMilli())
	if err := raw.XAdd(ctx, &redis.XAddArgs{Stream: key, ID: future, Values: vals}).Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ahead:
	case <-time.After(10 * time.Second):
		t.Fatal("the entry written ahead was not delivered")
	}
	if err := b.DeleteTopic(ctx, topic); err != nil {
		t.Fatal(err)
	}
	if err := raw.Del(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	if err := b.Publish(ctx, topic, pubsub.Event{Type: "after"}); err != nil {
		t.Fatal(err)
	}
	var got []int
	deadline := time.After(10 * time.Second)
	for len(got) < 2 {
		select {
		case a := <-attempts:
			got = append(got, a)
		case <-deadline:
			t.Fatalf("attempts of the event published after the deletion: %v; want 1 then 2 (its failure retried)", got)
		}
	}
	if got[0] != 1 || got[1] != 2 {
		t.Fatalf("attempts %v, want [1 2]", got)
	}
}
