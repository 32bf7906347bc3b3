package redisstreams

import (
	"context"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// TestFlushAfterStreamGone: a fan-out subscription handled the only event
// published, then the topic's stream went — deleted by this Backend
// (DeleteTopic), by another client, or expired (StreamIdleTTL). Flush must
// return: what it waits for was handled. Found by review 7 of 2026-11-22:
// Flush kept the old stream's last id as its target while the fan-out
// cursor was reset to 0-0, and waited until a later publish passed it
// (forever with a background ctx; 5s deadline exceeded in every run).
func TestFlushAfterStreamGone(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t, redistest.Options{})
	for _, tc := range []struct {
		name string
		opts Options
		gone func(t *testing.T, b *Backend)
	}{
		{"DeleteTopic", Options{}, func(t *testing.T, b *Backend) {
			if err := b.DeleteTopic(context.Background(), "t"); err != nil {
				t.Fatal(err)
			}
		}},
		{"deleted by another client", Options{}, func(t *testing.T, b *Backend) {
			if err := srv.Client(t).Del(context.Background(), b.keys.Stream("t")).Err(); err != nil {
				t.Fatal(err)
			}
		}},
		{"StreamIdleTTL", Options{StreamIdleTTL: 300 * time.Millisecond}, func(t *testing.T, b *Backend) {
			c := srv.Client(t)
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				if n, _ := c.Exists(context.Background(), b.keys.Stream("t")).Result(); n == 0 {
					return
				}
				if time.Now().After(deadline) {
					t.Fatal("the stream did not expire")
				}
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			o := tc.opts
			o.Prefix = psPrefix()
			o.BlockTime = 200 * time.Millisecond
			b, err := NewURL(ctx, srv.URL(), o)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = b.Close() })
			got := make(chan struct{}, 1)
			sub, err := b.Subscribe(ctx, "t", func(ctx context.Context, e pubsub.Event) error {
				got <- struct{}{}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Unsubscribe(ctx)
			if err := b.Publish(ctx, "t", pubsub.Event{Type: "x"}); err != nil {
				t.Fatal(err)
			}
			select {
			case <-got:
			case <-time.After(10 * time.Second):
				t.Fatal("event not handled within 10s")
			}
			tc.gone(t, b)
			time.Sleep(3 * o.BlockTime) // the reader's check of its streams ran
			fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			start := time.Now()
			if err := b.Flush(fctx); err != nil {
				t.Fatalf("Flush after the stream went = %v after %v, want nil", err, time.Since(start).Round(time.Millisecond))
			}
		})
	}
}
