package redisstreams

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// TestReviewH75FlushAfterWipe: events this Backend published and its
// subscriptions had not read yet are gone with a FLUSHALL or a restart
// without data. A Flush called after that must not wait for them until
// its ctx ends (for ever on a ctx without a deadline): the stream is gone,
// with nothing published since, and the fan-out reader's check of its
// stream (every BlockTime, 2s by default) finds it gone.
func TestReviewH75FlushAfterWipe(t *testing.T) {
	for _, kind := range []string{"fanout", "group"} {
		for _, how := range []string{"Restart", "FlushAll"} {
			t.Run(kind+"/"+how, func(t *testing.T) {
				srv := redistest.Start(t, redistest.Options{})
				b := urlBackend(t, srv.URL(), Options{})
				var opts []pubsub.SubscribeOption
				if kind == "group" {
					opts = append(opts, pubsub.Group("g"))
				}
				gate := make(chan struct{})
				sub, err := b.Subscribe(t.Context(), "f", func(ctx context.Context, e pubsub.Event) error {
					select {
					case <-gate:
					case <-ctx.Done():
					}
					return nil
				}, opts...)
				if err != nil {
					t.Fatal(err)
				}
				defer sub.Unsubscribe(t.Context())
				for i := range 300 {
					if err := b.Publish(t.Context(), "f", pubsub.Event{ID: fmt.Sprint(i), Type: "t"}); err != nil {
						t.Fatal(err)
					}
				}
				switch how {
				case "Restart":
					srv.Kill(t)
					srv.Restart(t)
				case "FlushAll":
					if err := srv.Client(t).FlushAll(t.Context()).Err(); err != nil {
						t.Fatal(err)
					}
				}
				close(gate)
				ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
				defer cancel()
				began := time.Now()
				err = b.Flush(ctx)
				t.Logf("Flush after the %s: %v after %v", how, err, time.Since(began).Round(time.Millisecond))
				if err != nil {
					t.Errorf("Flush after the %s: %v (after %v)", how, err, time.Since(began).Round(time.Millisecond))
				}
			})
		}
	}
}
