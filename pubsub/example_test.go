package pubsub_test

import (
	"context"
	"fmt"

	"github.com/leasebus/leasebus/inmem"
	"github.com/leasebus/leasebus/pubsub"
)

// logged wraps a PubSub, adding nothing here; it passes on no optional
// capability, but it has Unwrap.
type logged struct{ pubsub.PubSub }

func (l logged) Unwrap() pubsub.PubSub { return l.PubSub }

// As finds an optional capability that a wrapper does not pass on, on the
// PubSub it wraps.
func ExampleAs() {
	backend := inmem.New()
	defer backend.Close()
	var ps pubsub.PubSub = logged{backend}

	_, direct := ps.(pubsub.BacklogReader)
	br, found := pubsub.As[pubsub.BacklogReader](ps)
	fmt.Println("type assertion:", direct, "As:", found)

	ctx := context.Background()
	_ = ps.Publish(ctx, "orders", pubsub.Event{Type: "order.created"})
	bl, err := br.GroupBacklog(ctx, "orders", "billing")
	fmt.Println("lag of a group not created yet:", bl.Lag, err)
	// Output:
	// type assertion: false As: true
	// lag of a group not created yet: 1 <nil>
}
