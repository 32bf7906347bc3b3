package inmem_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"

	"github.com/leasebus/leasebus/inmem"
	"github.com/leasebus/leasebus/pubsub"
)

// Publish events, watch all of them with a fan-out subscription, and share
// the work between the two members of a group.
func ExampleBackend_Publish() {
	ctx := context.Background()
	b := inmem.New()
	defer b.Close()

	// A fan-out subscription receives every event, in order.
	audit, err := b.Subscribe(ctx, "jobs", func(_ context.Context, e pubsub.Event) error {
		fmt.Println("audit:", e.Type, string(e.Data))
		return nil // ack
	})
	if err != nil {
		panic(err)
	}
	defer audit.Unsubscribe(ctx)

	// Two members of the group "workers": each event goes to exactly one.
	var mu sync.Mutex
	var done []int
	work := func(_ context.Context, e pubsub.Event) error {
		var job struct{ N int }
		if err := json.Unmarshal(e.Data, &job); err != nil {
			return err // nack: redelivered with DeliveryAttempt+1
		}
		mu.Lock()
		done = append(done, job.N)
		mu.Unlock()
		return nil
	}
	for range 2 {
		w, err := b.Subscribe(ctx, "jobs", work, pubsub.Group("workers"))
		if err != nil {
			panic(err)
		}
		defer w.Unsubscribe(ctx)
	}

	for n := 1; n <= 3; n++ {
		e := pubsub.Event{Type: "job.created", Data: json.RawMessage(fmt.Sprintf(`{"n":%d}`, n))}
		if err := b.Publish(ctx, "jobs", e); err != nil {
			panic(err)
		}
	}

	// Flush waits until the handlers have finished those events.
	if err := b.Flush(ctx); err != nil {
		panic(err)
	}
	mu.Lock()
	slices.Sort(done)
	fmt.Println("workers did jobs", done)
	mu.Unlock()

	// Output:
	// audit: job.created {"n":1}
	// audit: job.created {"n":2}
	// audit: job.created {"n":3}
	// workers did jobs [1 2 3]
}
