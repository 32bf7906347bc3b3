package redisstreams

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// TestReviewH66FlushReportsAckGivenUp: an ack refused with an error reply
// that stays (here NOPERM: the ACL of the client's user lost XACK, as an
// operator's change can) is given up on after the ack writer's nine tries.
// Flush says it waits "until every ack queued before the call is written
// to Redis": it must not return nil while the handled entry is still
// pending (to be run again after the ack deadline).
func TestReviewH66FlushReportsAckGivenUp(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	admin := srv.Client(t)
	b := urlBackend(t, srv.URL(), Options{})
	t.Cleanup(func() { admin.Do(context.Background(), "ACL", "SETUSER", "default", "+xack") })
	var runs atomic.Int32
	sub, err := b.Subscribe(ctx, "t", func(ctx context.Context, e pubsub.Event) error {
		if runs.Add(1) == 1 {
			if err := admin.Do(ctx, "ACL", "SETUSER", "default", "-xack").Err(); err != nil {
				t.Error(err)
			}
		}
		return nil
	}, pubsub.Group("g"), pubsub.AckDeadline(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe(ctx) })
	pub := psBackend(t, admin, Options{Prefix: b.opts.Prefix})
	if err := pub.Publish(ctx, "t", pubsub.Event{ID: "x", Type: "x"}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for runs.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("not delivered within 30s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	start := time.Now()
	ferr := b.Flush(fctx)
	cancel()
	pend, err := admin.XPending(ctx, b.keys.Stream("t"), "g").Result()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Flush = %v after %v; pending %d", ferr, time.Since(start).Round(time.Millisecond), pend.Count)
	if ferr == nil && pend.Count != 0 {
		t.Errorf("Flush returned nil with the handled entry's ack given up on (%d pending)", pend.Count)
	}
	if err := admin.Do(ctx, "ACL", "SETUSER", "default", "+xack").Err(); err != nil {
		t.Fatal(err)
	}
}
