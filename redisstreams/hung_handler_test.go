package redisstreams

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leasebus/leasebus/inmem"
	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// TestHungHandlerHoldsNoQueuedEvents: pubsub/options.go AckDeadline "sets
// how long a delivery may stay unacked before it is redelivered to a live
// member". Member A's handler hangs on its first event (ack deadline 1s);
// member B, subscribed after the events were published, is idle. The
// events published after the first must reach B (the hung
// one too, after the deadline), not wait behind the hung handler for ever.
//
// Found by review h53 (2026-11-29): on redisstreams B got only e0 (taken
// over after the deadline); e1-e5, which A had read ahead, waited behind
// A's hung handler for as long as it hung, their idle time refreshed
// (refreshQueued). A member whose every handler ran one entry longer than
// AckDeadline now hands its queued entries back.
func TestHungHandlerHoldsNoQueuedEvents(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	for name, mk := range map[string]func() (pubsub.PubSub, pubsub.PubSub){
		"redis": func() (pubsub.PubSub, pubsub.PubSub) {
			o := Options{Prefix: psPrefix()}
			return urlBackend(t, srv.URL(), o), urlBackend(t, srv.URL(), o)
		},
		"inmem": func() (pubsub.PubSub, pubsub.PubSub) {
			b := inmem.New()
			t.Cleanup(func() { b.Close() })
			return b, b
		},
	} {
		t.Run(name, func(t *testing.T) {
			a, b := mk()
			ctx := context.Background()
			var mu sync.Mutex
			byB := map[string]bool{}
			started := make(chan struct{}, 1)
			_, err := a.Subscribe(ctx, "t", func(ctx context.Context, e pubsub.Event) error {
				select {
				case started <- struct{}{}:
				default:
				}
				<-ctx.Done() // hangs until the subscription stops
				return nil
			}, pubsub.Group("g"), pubsub.AckDeadline(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			for i := range 6 {
				if err := a.Publish(ctx, "t", pubsub.Event{ID: fmt.Sprint("e", i), Type: "x"}); err != nil {
					t.Fatal(err)
				}
				if i == 0 {
					<-started
				}
			}
			time.Sleep(300 * time.Millisecond) // A's reads
			_, err = b.Subscribe(ctx, "t", func(ctx context.Context, e pubsub.Event) error {
				mu.Lock()
				byB[e.ID] = true
				mu.Unlock()
				return nil
			}, pubsub.Group("g"), pubsub.AckDeadline(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			// At most one event can be on A's hung handler at a time; each
			// is taken over after 1s.
			missing := func() []string {
				mu.Lock()
				defer mu.Unlock()
				var out []string
				for i := range 6 {
					if id := fmt.Sprint("e", i); !byB[id] {
						out = append(out, id)
					}
				}
				return out
			}
			deadline := time.Now().Add(8 * time.Second) // 8 ack deadlines
			for len(missing()) > 1 && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
			}
			t.Logf("the idle member had all but at most one event %v after it subscribed", time.Since(deadline.Add(-8*time.Second)).Round(10*time.Millisecond))
			if m := missing(); len(m) > 1 {
				t.Errorf("after 8 ack deadlines the idle member has not been given %v: they wait behind the other member's hung handler", m)
			}
		})
	}
}
