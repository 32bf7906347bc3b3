package redisstreams

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// TestReviewH66CloseReportsAcksGivenUp: a group subscription on a NewURL
// Backend acks an event as its Redis is black-holed, and its Unsubscribe
// (a short ctx, then a second one that waits for its clean-up to give up)
// returns before the ack is written; the ack is still queued. Close then "writes the remaining acks" and
// "returns nil when all that is done, or the errors it met" (Shutdown's
// doc): when its acker gives up on the ack after ackCloseGrace, that is an
// error it met, and a nil would tell the caller every ack was written while
// the entry stays pending, to be run again elsewhere.
func TestReviewH66CloseReportsAcksGivenUp(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t, redistest.Options{})
	proxy := redistest.NewProxy(t, srv.Addr())
	t.Cleanup(proxy.Restore)
	ctx := context.Background()
	prefix := psPrefix()
	b, err := NewURL(ctx, "redis://"+proxy.Addr()+"/0", Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{}, 1)
	release := make(chan struct{})
	sub, err := b.Subscribe(ctx, "t", func(ctx context.Context, e pubsub.Event) error {
		started <- struct{}{}
		<-release
		return nil
	}, pubsub.Group("g"), pubsub.AckDeadline(time.Second))
	if err != nil {
		_ = b.Close()
		t.Fatal(err)
	}
	if err := b.Publish(ctx, "t", pubsub.Event{ID: "x", Type: "x"}); err != nil {
		_ = b.Close()
		t.Fatal(err)
	}
	<-started
	proxy.BlackHole()
	close(release) // the ack is queued on a black-holed server
	uctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	uerr := sub.Unsubscribe(uctx)
	cancel()
	t.Logf("Unsubscribe(500ms) = %v", uerr)
	// A second Unsubscribe waits for the clean-up to end (it gives up on
	// the hole after 10s); the ack is still queued.
	uctx, cancel = context.WithTimeout(ctx, 30*time.Second)
	uerr = sub.Unsubscribe(uctx)
	cancel()
	t.Logf("Unsubscribe(30s) = %v", uerr)
	// Its ctx had not ended: the error says what timed out, not a bare
	// "context deadline exceeded" (review h66).
	if uerr == nil || !strings.Contains(uerr.Error(), "acks were not written") || !strings.Contains(uerr.Error(), `"t"`) {
		t.Errorf("Unsubscribe(30s) = %v, want an error naming the topic and the acks not written", uerr)
	}
	start := time.Now()
	cerr := b.Close()
	t.Logf("Close() = %v after %v", cerr, time.Since(start).Round(time.Millisecond))
	proxy.Restore()
	n, err := srv.Client(t).XPending(ctx, b.keys.Stream("t"), "g").Result()
	if err != nil {
		t.Fatal(err)
	}
	if n.Count != 0 && cerr == nil {
		t.Errorf("Close() = nil, but the ack of the handled event was not written (%d pending)", n.Count)
	}
}
