package signals_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leasebus/leasebus/pubsub"
	"github.com/leasebus/leasebus/redisstreams"
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

// TestOversizeSignalStartsNoTenure: on redisstreams (pubsub.EventChecker,
// found by the runtime through pubsub.As) a signal the backend would refuse
// for its size, or whose thread name or ID makes its wake notice too big,
// is refused with ErrInvalid before Send takes the thread's lease: no
// tenure starts, no key of the thread is written. Before, Send acquired the lease and
// started a tenure, then failed at the publish (review h61: its
// TestReviewH61OversizeSignalStartsNoTenure).
func TestOversizeSignalStartsNoTenure(t *testing.T) {
	srv, c := startRedis(t)
	ctx := context.Background()
	const limit = 4096
	b, err := redisstreams.NewURL(ctx, srv.URL(), redisstreams.Options{Prefix: "ovs", MaxEventSize: limit})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	started := make(chan signals.Event, 10)
	ran := make(chan string, 1)
	rt := newRuntime(t, b, func(ctx context.Context, run *signals.Run) error {
		ran <- run.Signals[0].ID
		return nil
	}, signals.WithObserver(func(e signals.Event) {
		if e.Kind == signals.TenureStarted {
			started <- e
		}
	}))
	big := strings.Repeat("x", limit)
	for _, tc := range []struct {
		name, thread string
		sig          signals.Signal
	}{
		{"Data", "t", signals.Signal{ID: "s1", Type: "msg", Data: []byte(big)}},
		{"Metadata", "t", signals.Signal{ID: "s1", Type: "msg", Metadata: map[string]string{"k": big}}},
		{"ID", "t", signals.Signal{ID: big, Type: "msg"}},
		{"ThreadName", big, signals.Signal{ID: "s1", Type: "msg"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := rt.Send(ctx, tc.thread, tc.sig)
			if !errors.Is(err, signals.ErrInvalid) || !errors.Is(err, pubsub.ErrInvalid) || !strings.Contains(err.Error(), "MaxEventSize") {
				t.Fatalf("Send: %v, want an error wrapping signals.ErrInvalid and pubsub.ErrInvalid naming MaxEventSize", err)
			}
			select {
			case e := <-started:
				t.Fatalf("a tenure started for a refused signal (%s, a thread name of %d bytes, token %d)", e.Kind, len(e.Thread), e.Token)
			default:
			}
			// The runtime's own work topic and its read guard are there
			// from the start; nothing else may be.
			for _, k := range c.Keys(ctx, "ovs:*").Val() {
				if !strings.HasPrefix(k, "ovs:{"+signals.WorkTopic+"}") {
					t.Fatalf("key %s written for a refused signal", k)
				}
			}
		})
	}
	// Just under the limit is taken, and runs.
	if _, err := rt.Send(ctx, "t", signals.Signal{ID: "ok", Type: "msg", Data: []byte(big[:limit-200])}); err != nil {
		t.Fatalf("Send under the limit: %v", err)
	}
	select {
	case id := <-ran:
		if id != "ok" {
			t.Fatalf("ran %q, want ok", id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("signal under the limit not run within 10s")
	}
}
