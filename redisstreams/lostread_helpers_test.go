package redisstreams

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"

	"github.com/leasebus/leasebus/pubsub"
)

// Helpers of the lost-read tests (stall_read_test.go, lostread_*_test.go).

// readFailures returns a logger that passes every record on to next and
// signals on the channel once per "group read failed" warning (a read the
// stalled server did not answer), so a test can wait for the nth.
func readFailures(next slog.Handler) (*slog.Logger, chan struct{}) {
	fails := make(chan struct{}, 100)
	return slog.New(&signalHandler{Handler: next, msg: "redisstreams: group read failed; retrying", ch: fails}), fails
}

// countDeadLetters counts (in dead) and logs what arrives on topic's
// dead-letter topic, from a fan-out subscription that t's cleanup stops.
func countDeadLetters(t *testing.T, b *Backend, topic string, dead *atomic.Int64) {
	t.Helper()
	dsub, err := b.Subscribe(context.Background(), pubsub.DeadLetterTopic(topic), func(ctx context.Context, e pubsub.Event) error {
		dead.Add(1)
		t.Logf("dead letter: %s reason=%q", e.Type, e.Metadata[pubsub.MetaDeadReason])
		return nil
	}, pubsub.StartFrom(pubsub.Earliest))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dsub.Unsubscribe(context.Background()) })
}

// publishXs publishes n events of type "x" on topic.
func publishXs(t *testing.T, b *Backend, topic string, n int) {
	t.Helper()
	for range n {
		if err := b.Publish(context.Background(), topic, pubsub.Event{Type: "x"}); err != nil {
			t.Fatal(err)
		}
	}
}

// signalHandler sends on ch for each record whose message is msg.
type signalHandler struct {
	slog.Handler
	msg string
	ch  chan struct{}
}

func (h *signalHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == h.msg {
		select {
		case h.ch <- struct{}{}:
		default:
		}
	}
	return h.Handler.Handle(ctx, r)
}
