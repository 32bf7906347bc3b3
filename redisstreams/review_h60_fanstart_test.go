package redisstreams

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// TestReviewH60FanOutStartsNothingAfterUnsubscribe: once Unsubscribe
// began ("stops deliveries"), a fan-out subscription's workers start no
// handler for the entries still in its channel: a handler started then
// gets an ended ctx (review h60; inmem and the group members check their
// ctx before they start a delivery).
func TestReviewH60FanOutStartsNothingAfterUnsubscribe(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	b := urlBackend(t, srv.URL(), Options{Prefix: psPrefix()})
	ctx := context.Background()
	entered := make(chan struct{}, 1)
	var calls, late atomic.Int32
	sub, err := b.Subscribe(ctx, "t", func(ctx context.Context, e pubsub.Event) error {
		if calls.Add(1) == 1 {
			entered <- struct{}{}
			<-ctx.Done()
			return nil
		}
		if ctx.Err() != nil {
			late.Add(1)
		}
		return nil
	}, pubsub.Concurrency(1))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 60 {
		if err := b.Publish(ctx, "t", pubsub.Event{ID: strconv.Itoa(i), Type: "x"}); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			<-entered
		}
	}
	time.Sleep(300 * time.Millisecond) // the reader fills the channel behind the blocked worker
	if err := sub.Unsubscribe(ctx); err != nil {
		t.Fatal(err)
	}
	if n := late.Load(); n > 0 {
		t.Errorf("%d handlers started after Unsubscribe began (ended ctx), %d calls in all", n, calls.Load())
	}
}
