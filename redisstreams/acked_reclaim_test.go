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

// TestAckedEventNotTakenAgainBeforeItsAck: a group's lone member whose
// handlers each run longer than AckDeadline (250ms against 150ms,
// Concurrency 2) takes bursts of events, with MaxDeliveries(1). Every
// handler returns nil, so every event must run once and none may be
// dead-lettered; and the events the member hands back while both handlers
// are past the deadline (refreshQueued) must still run while it keeps up.
//
// Before the fix, the member's own reclaim pass took an event whose
// handler had just returned nil while its XACK was still queued in the
// acker (pending on the server, idle longer than AckDeadline): it ran
// again 1ms later as attempt 2, or with MaxDeliveries(1) went to the
// dead-letter topic "delivered 1 times without an ack".
func TestAckedEventNotTakenAgainBeforeItsAck(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	for name, mk := range map[string]func() pubsub.PubSub{
		"redis": func() pubsub.PubSub { return urlBackend(t, srv.URL(), Options{Prefix: psPrefix()}) },
		"inmem": func() pubsub.PubSub {
			b := inmem.New()
			t.Cleanup(func() { b.Close() })
			return b
		},
	} {
		t.Run(name, func(t *testing.T) {
			ps := mk()
			ctx := context.Background()
			var mu sync.Mutex
			runs := map[string]int{}
			var dead []string
			dsub, err := ps.Subscribe(ctx, pubsub.DeadLetterTopic("t"), func(_ context.Context, e pubsub.Event) error {
				mu.Lock()
				dead = append(dead, e.ID)
				mu.Unlock()
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			defer dsub.Unsubscribe(ctx)
			sub, err := ps.Subscribe(ctx, "t", func(ctx context.Context, e pubsub.Event) error {
				mu.Lock()
				runs[e.ID]++
				mu.Unlock()
				select {
				case <-time.After(250 * time.Millisecond):
				case <-ctx.Done():
				}
				return nil
			}, pubsub.Group("g"), pubsub.Concurrency(2), pubsub.AckDeadline(150*time.Millisecond), pubsub.MaxDeliveries(1))
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Unsubscribe(ctx)
			// Bursts of 6 (1.5 rounds of both handlers past the deadline,
			// 4 events queued behind them), one per 1.2s: the member keeps
			// up (8 events/s against 5/s).
			const n = 60
			for i := range n {
				if err := ps.Publish(ctx, "t", pubsub.Event{ID: fmt.Sprint("e", i), Type: "x"}); err != nil {
					t.Fatal(err)
				}
				if i%6 == 5 {
					time.Sleep(1200 * time.Millisecond)
				}
			}
			deadline := time.Now().Add(30 * time.Second)
			for {
				mu.Lock()
				k := len(runs) + len(dead)
				mu.Unlock()
				if k >= n || time.Now().After(deadline) {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			// What a late duplicate needs to show: its ack written, a
			// reclaim pass (half the deadline), one more handler run.
			if err := ps.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			time.Sleep(600 * time.Millisecond)
			mu.Lock()
			defer mu.Unlock()
			var twice, never []string
			for i := range n {
				id := fmt.Sprint("e", i)
				switch runs[id] {
				case 0:
					never = append(never, id)
				case 1:
				default:
					twice = append(twice, fmt.Sprintf("%s×%d", id, runs[id]))
				}
			}
			if len(twice) > 0 || len(never) > 0 || len(dead) > 0 {
				t.Fatalf("every handler returned nil: want each of %d events run once and none dead-lettered; ran more than once %v, never ran %v, dead-lettered %v", n, twice, never, dead)
			}
		})
	}
}
