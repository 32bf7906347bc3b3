// Command pubsub shows leasebus events on the in-process backend: fan-out
// subscriptions that each get every event, a consumer group whose members
// share the events, and a handler that fails once so the event is
// redelivered with DeliveryAttempt 2.
//
// The same code runs across processes on Redis: replace inmem.New() with
// redisstreams.NewURL(ctx, "redis://localhost:6379", redisstreams.Options{}).
//
// Run it with:
//
//	go run ./examples/pubsub
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/leasebus/leasebus/inmem"
	"github.com/leasebus/leasebus/pubsub"
)

func main() {
	if err := run(context.Background(), os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// tally counts what each subscriber saw; it is safe for concurrent use.
type tally struct {
	mu   sync.Mutex
	seen map[string][]string // subscriber -> "type#order(attempt)"
	n    int
	all  chan struct{} // closed when n reaches want
	want int
}

func (t *tally) add(who string, e pubsub.Event) {
	var body struct {
		Order int `json:"order"`
	}
	_ = json.Unmarshal(e.Data, &body)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.seen[who] = append(t.seen[who], fmt.Sprintf("%s#%d(attempt %d)", e.Type, body.Order, e.DeliveryAttempt))
	t.n++
	if t.n == t.want {
		close(t.all)
	}
}

func run(ctx context.Context, w io.Writer) error {
	bus := inmem.New()
	defer bus.Close()

	const orders = 3
	// 2 fan-out subscribers x 3 + a group x 3 + the retry subscriber's 3 + 1 redelivery.
	t := &tally{seen: map[string][]string{}, all: make(chan struct{}), want: 2*orders + orders + orders + 1}

	// Fan-out: without a Group option every subscription gets every event.
	for _, who := range []string{"audit", "mailer"} {
		sub, err := bus.Subscribe(ctx, "orders", func(_ context.Context, e pubsub.Event) error {
			t.add(who, e)
			return nil
		})
		if err != nil {
			return err
		}
		defer sub.Unsubscribe(ctx)
	}

	// Competing consumers: the two members of group "billing" share the
	// events; each event goes to exactly one of them.
	for range 2 {
		sub, err := bus.Subscribe(ctx, "orders", func(_ context.Context, e pubsub.Event) error {
			t.add("billing", e) // counted together: which member got it varies
			return nil
		}, pubsub.Group("billing"))
		if err != nil {
			return err
		}
		defer sub.Unsubscribe(ctx)
	}

	// At-least-once: returning an error nacks the delivery, and the event
	// comes back with DeliveryAttempt counted up.
	failed := false
	sub, err := bus.Subscribe(ctx, "orders", func(_ context.Context, e pubsub.Event) error {
		t.add("shipping", e)
		if e.DeliveryAttempt == 1 && !failed && string(e.Data) == `{"order":2}` {
			failed = true
			return errors.New("card service unavailable")
		}
		return nil
	}, pubsub.Group("shipping"))
	if err != nil {
		return err
	}
	defer sub.Unsubscribe(ctx)

	for i := 1; i <= orders; i++ {
		data, _ := json.Marshal(map[string]int{"order": i})
		if err := bus.Publish(ctx, "orders", pubsub.Event{Type: "order.created", Data: data}); err != nil {
			return err
		}
	}
	select {
	case <-t.all:
	case <-time.After(10 * time.Second):
		return errors.New("timed out waiting for deliveries")
	}

	t.mu.Lock()
	defer t.mu.Unlock()
	for _, who := range []string{"audit", "mailer", "billing", "shipping"} {
		got := t.seen[who]
		if who == "billing" || who == "shipping" {
			slices.Sort(got) // members and redeliveries interleave
		}
		fmt.Fprintf(w, "%-10s%v\n", who+":", got)
	}
	return nil
}
