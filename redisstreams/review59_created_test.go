package redisstreams

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// TestReview59CreatedAtOutsideNanoRange publishes events whose CreatedAt
// Unix nanoseconds cannot hold (before 1678 or after 2262: time.UnixNano
// is undefined there). Each must be delivered with its CreatedAt, or
// Publish must refuse it with an error wrapping pubsub.ErrInvalid that
// names CreatedAt; never delivered with another time.
func TestReview59CreatedAtOutsideNanoRange(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	b, err := NewURL(ctx, srv.URL(), Options{Prefix: psPrefix()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	got := make(chan pubsub.Event, 8)
	sub, err := b.Subscribe(ctx, "times", func(ctx context.Context, e pubsub.Event) error { got <- e; return nil })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe(ctx)
	for _, tc := range []struct {
		name string
		at   time.Time
	}{
		{"year 2300", time.Date(2300, 1, 2, 3, 4, 5, 6, time.UTC)},
		{"year 1600", time.Date(1600, 1, 2, 3, 4, 5, 6, time.UTC)},
		{"year 1, one nanosecond", time.Date(1, 1, 1, 0, 0, 0, 1, time.UTC)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := b.Publish(ctx, "times", pubsub.Event{Type: "t", CreatedAt: tc.at})
			if err != nil {
				if !errors.Is(err, pubsub.ErrInvalid) {
					t.Fatalf("Publish: %v; want nil or an error wrapping pubsub.ErrInvalid", err)
				}
				return
			}
			select {
			case e := <-got:
				if !e.CreatedAt.Equal(tc.at) {
					t.Fatalf("delivered with CreatedAt %v, published with %v", e.CreatedAt, tc.at)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("not delivered within 10s")
			}
		})
	}
}
