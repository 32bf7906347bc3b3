package inmem_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

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

// A failing event is redelivered after RedeliveryDelay and, after
// MaxDeliveries attempts, published to "<topic>.dead" with the reason.
func ExampleBackend_Subscribe_deadLetter() {
	ctx := context.Background()
	b := inmem.New()
	defer b.Close()

	dead := make(chan pubsub.Event, 1)
	if _, err := b.Subscribe(ctx, pubsub.DeadLetterTopic("mail"), func(_ context.Context, e pubsub.Event) error {
		dead <- e
		return nil
	}); err != nil {
		panic(err)
	}
	if _, err := b.Subscribe(ctx, "mail", func(_ context.Context, e pubsub.Event) error {
		fmt.Println("attempt", e.DeliveryAttempt)
		return fmt.Errorf("smtp: mailbox full")
	}, pubsub.MaxDeliveries(3), pubsub.RedeliveryDelay(time.Millisecond)); err != nil {
		panic(err)
	}
	if err := b.Publish(ctx, "mail", pubsub.Event{Type: "mail.send"}); err != nil {
		panic(err)
	}
	e := <-dead
	fmt.Println("dead letter:", e.Type, e.Metadata[pubsub.MetaDeadReason], "after", e.Metadata[pubsub.MetaDeadAttempts])
	// Output:
	// attempt 1
	// attempt 2
	// attempt 3
	// dead letter: mail.send smtp: mailbox full after 3
}

// Shutdown bounds the wait for handlers that ignore their ctx: it returns
// ctx.Err() when ctx ends first, and the Backend is closed all the same.
func ExampleBackend_Shutdown() {
	b := inmem.New()
	started, release := make(chan struct{}), make(chan struct{})
	if _, err := b.Subscribe(context.Background(), "jobs", func(context.Context, pubsub.Event) error {
		close(started)
		<-release // a handler that ignores its ctx
		return nil
	}); err != nil {
		panic(err)
	}
	if err := b.Publish(context.Background(), "jobs", pubsub.Event{Type: "job"}); err != nil {
		panic(err)
	}
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	fmt.Println("shutdown:", b.Shutdown(ctx))
	fmt.Println("publish:", b.Publish(context.Background(), "jobs", pubsub.Event{Type: "job"}))
	close(release)
	fmt.Println("close:", b.Close()) // waits for the handler that was given up on
	// Output:
	// shutdown: context deadline exceeded
	// publish: pubsub: closed
	// close: <nil>
}
