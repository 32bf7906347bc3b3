package redisstreams_test

import (
	"context"
	"errors"
	"log"

	"github.com/leasebus/leasebus/pubsub"
	"github.com/leasebus/leasebus/redisstreams"
)

// Refuse to start on a Redis whose eviction policy could evict leases or
// fencing counters, keep the newest 10,000 events of each topic (plus what
// groups have not acked), and delete a topic nobody needs any more. The
// example needs a Redis at localhost:6379, so it is compiled but not run.
func ExampleBackend_CheckEviction() {
	ctx := context.Background()
	b, err := redisstreams.NewURL(ctx, "redis://localhost:6379/0", redisstreams.Options{Retention: 10_000})
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
