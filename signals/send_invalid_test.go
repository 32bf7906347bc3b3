package signals_test

import (
	"context"
	"errors"
	"testing"

	"github.com/leasebus/leasebus/pubsub"
	"github.com/leasebus/leasebus/signals"
)

// TestSendBadMetadataStartsNoTenure: a signal whose Metadata is not valid
// UTF-8, which no pubsub stores (pubsub.ValidateEvent), is refused with
// ErrInvalid before Send takes the thread's lease: no tenure starts and
// the agent never runs. Before, Send acquired the lease and started a
// tenure, then failed at the publish (review h59 noticed).
func TestSendBadMetadataStartsNoTenure(t *testing.T) {
	b := newBackend(t)
	started := make(chan signals.Event, 10)
	rt := newRuntime(t, b, func(ctx context.Context, run *signals.Run) error {
		t.Error("the agent ran")
		return nil
	}, signals.WithObserver(func(e signals.Event) {
		if e.Kind == signals.TenureStarted {
			started <- e
		}
	}))
	_, err := rt.Send(t.Context(), "t", signals.Signal{ID: "s1", Type: "msg", Metadata: map[string]string{"k": "\xff"}})
	if !errors.Is(err, signals.ErrInvalid) || !errors.Is(err, pubsub.ErrInvalid) {
		t.Fatalf("Send: %v, want an error wrapping signals.ErrInvalid and pubsub.ErrInvalid", err)
	}
	select {
	case e := <-started:
		t.Fatalf("a tenure started for a refused signal: %+v", e)
	default:
	}
}
