package redisstreams_test

import (
	"context"
	"fmt"
	"log"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/pubsub"
	"github.com/leasebus/leasebus/redisstreams"
)

// Publish an event and handle it in a consumer group. The example needs a
// Redis at localhost:6379, so it is compiled but not run.
func ExampleBackend_Subscribe() {
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer client.Close() // the Backend never closes a client it was given

	b, err := redisstreams.New(client, redisstreams.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()

	done := make(chan struct{})
	sub, err := b.Subscribe(ctx, "orders", func(ctx context.Context, e pubsub.Event) error {
		fmt.Println(e.Type, string(e.Data), e.DeliveryAttempt)
		close(done)
		return nil // ack; an error would redeliver after pubsub.RetryDelay
	}, pubsub.Group("billing"), pubsub.MaxDeliveries(5))
	if err != nil {
		log.Fatal(err)
	}
	defer sub.Unsubscribe(ctx)

	// Publish returns once Redis has stored the event.
	if err := b.Publish(ctx, "orders", pubsub.Event{Type: "order.created", Data: []byte(`{"id":42}`)}); err != nil {
		log.Fatal(err)
	}
	<-done
}

// A fan-out subscription receives every event published after Subscribe
// returns; all fan-out subscriptions of a Backend share one connection.
func ExampleBackend_Subscribe_fanOut() {
	ctx := context.Background()
	b, err := redisstreams.NewURL(ctx, "redis://localhost:6379/0", redisstreams.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close() // NewURL made the client, so Close closes it

	sub, err := b.Subscribe(ctx, "thread.42", func(ctx context.Context, e pubsub.Event) error {
		fmt.Println("got", e.Type)
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	defer sub.Unsubscribe(ctx)
	_ = b.Publish(ctx, "thread.42", pubsub.Event{Type: "signal"})
	_ = b.Flush(ctx) // waits until the local subscription handled it
}
