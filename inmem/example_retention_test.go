package inmem_test

import (
	"context"
	"fmt"

	"github.com/leasebus/leasebus/inmem"
	"github.com/leasebus/leasebus/pubsub"
)

// Keep at least the newest 100 events of each topic for StartFrom(Earliest),
// then delete a topic: a group of the old name starts anew.
func ExampleBackend_DeleteTopic() {
	ctx := context.Background()
	b, err := inmem.NewWithOptions(inmem.Options{Retention: 100})
	if err != nil {
		panic(err)
	}
	defer b.Close()

	for n := range 300 {
		if err := b.Publish(ctx, "audit", pubsub.Event{Type: "entry", Data: []byte(fmt.Sprint(n))}); err != nil {
			panic(err)
		}
	}
	count := func() int {
		got := 0
		sub, err := b.Subscribe(ctx, "audit", func(context.Context, pubsub.Event) error { got++; return nil },
			pubsub.StartFrom(pubsub.Earliest))
		if err != nil {
			panic(err)
		}
		if err := b.Flush(ctx); err != nil {
			panic(err)
		}
		if err := sub.Unsubscribe(ctx); err != nil {
			panic(err)
		}
		return got
	}
	fmt.Println("replayed at least 100:", count() >= 100)

	// pubsub.TopicDeleter is found by type assertion, like every optional
	// capability.
	if d, ok := any(b).(pubsub.TopicDeleter); ok {
		if err := d.DeleteTopic(ctx, "audit"); err != nil {
			panic(err)
		}
	}
	fmt.Println("replayed after DeleteTopic:", count())
	// Output:
	// replayed at least 100: true
	// replayed after DeleteTopic: 0
}
