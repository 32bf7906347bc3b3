// Command custombackend shows how to plug a backend of your own into
// leasebus: ChanBus (bus.go) implements pubsub.PubSub with a log per topic
// and channels, moving events only (pubsub.Policy brings the delivery
// policy: panics, dead letters, redelivery delay), MapLeases (leases.go) implements lease.Provider with a mutex
// and a map. Backend joins them into one value, the shape the signals
// runtime and lease.ProviderOf look for. main_test.go runs the exported
// conformance suites, pubsubtest and leasetest, against them: passing those
// is what makes a backend a leasebus backend.
//
// Run it with:
//
//	go run ./examples/custombackend
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"slices"
	"time"

	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/pubsub"
)

// Backend is a ChanBus and a MapLeases in one value: a pubsub.PubSub that
// also has the lease capability.
type Backend struct {
	*ChanBus
	*MapLeases
}

var (
	_ pubsub.PubSub  = Backend{}
	_ lease.Provider = Backend{}
)

// NewBackend returns a Backend with an empty bus and lease table.
func NewBackend() Backend { return Backend{ChanBus: NewChanBus(), MapLeases: NewMapLeases()} }

// Close closes the bus and the lease table.
func (b Backend) Close() error {
	return errors.Join(b.ChanBus.Close(), b.MapLeases.Close())
}

func main() {
	if err := run(context.Background(), os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, w io.Writer) error {
	b := NewBackend()
	defer b.Close()

	// The lease capability is found by type assertion, as leasebus does.
	p, ok := lease.ProviderOf(b)
	fmt.Fprintf(w, "lease capability found: %v\n", ok)

	r, err := p.AcquireLease(ctx, "thread/42", "worker-1", 10*time.Second)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "worker-1 acquired thread/42: %v (token %d)\n", r.Acquired, r.Token)
	r, err = p.AcquireLease(ctx, "thread/42", "worker-2", 10*time.Second)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "worker-2 acquired thread/42: %v: %v\n", r.Acquired, lease.NewHeldError("thread/42", r))
	if _, err := p.TransferLease(ctx, "thread/42", "worker-1", "worker-2", 10*time.Second); err != nil {
		return err
	}
	info, err := b.InspectLease(ctx, "thread/42")
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "after transfer: held by %s with token %d\n", info.Owner, info.Token)

	// Events: two fan-out subscribers each get every event.
	got := make(chan string, 4)
	for _, name := range []string{"audit", "mailer"} {
		sub, err := b.Subscribe(ctx, "orders", func(_ context.Context, e pubsub.Event) error {
			got <- fmt.Sprintf("%s got %s %s", name, e.Type, e.Data)
			return nil
		})
		if err != nil {
			return err
		}
		defer sub.Unsubscribe(ctx)
	}
	if err := b.Publish(ctx, "orders", pubsub.Event{Type: "order.created", Data: []byte(`{"order":1}`)}); err != nil {
		return err
	}
	var lines []string
	for range 2 {
		select {
		case l := <-got:
			lines = append(lines, l)
		case <-time.After(5 * time.Second):
			return errors.New("timed out waiting for deliveries")
		}
	}
	slices.Sort(lines) // the two subscribers run concurrently
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
	return nil
}
