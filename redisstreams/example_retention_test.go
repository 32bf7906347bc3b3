package redisstreams_test

import (
	"context"
	"errors"
	"log"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/pubsub"
	"github.com/leasebus/leasebus/redisstreams"
)

// Refuse to start on a Redis whose eviction policy could evict leases or
// fencing counters, keep the newest 10,000 events of each topic (plus what
// groups have not acked), and delete a topic nobody needs any more. The
// example needs a Redis at localhost:6379, so it is compiled but not run.
func ExampleBackend_CheckEviction() {
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: "localhost:6379", ContextTimeoutEnabled: true})
	defer client.Close()

	b, err := redisstreams.New(client, redisstreams.Options{Retention: 10_000})
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()
	switch err := b.CheckEviction(ctx); {
	case errors.Is(err, redisstreams.ErrUnsafeEviction):
		log.Fatal(err) // names the server and its maxmemory-policy
	case err != nil:
		log.Printf("eviction policy unknown (CONFIG disabled?): %v", err)
	}

	var d pubsub.TopicDeleter = b
	if err := d.DeleteTopic(ctx, "reports.2024"); err != nil {
		log.Fatal(err)
	}
}
