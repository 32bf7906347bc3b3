package main

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasebus/leasebus/pubsub"
)

// TestReviewH60GoexitStorm: many handlers end their goroutine
// (runtime.Goexit) at once, some twice for the same event, on every kind
// of subscription: each event is acked exactly once after exactly its
// planned attempts, Flush returns, no subscription runs more handlers at
// once than its Concurrency, and afterwards the subscription still takes
// new events with all its tokens back (review h60).
func TestReviewH60GoexitStorm(t *testing.T) {
	backends := map[string]func(t *testing.T) pubsub.PubSub{
		"chanbus": func(t *testing.T) pubsub.PubSub {
			b := NewChanBus()
			t.Cleanup(func() { b.Close() })
			return b
		},
	}
	type setup struct {
		name    string
		members int
		opts    []pubsub.SubscribeOption
	}
	setups := []setup{
		{"FanOut1", 1, []pubsub.SubscribeOption{pubsub.Concurrency(1)}},
		{"FanOut4", 1, []pubsub.SubscribeOption{pubsub.Concurrency(4)}},
		{"Group1", 1, []pubsub.SubscribeOption{pubsub.Group("g"), pubsub.Concurrency(1)}},
		{"Group4", 1, []pubsub.SubscribeOption{pubsub.Group("g"), pubsub.Concurrency(4)}},
		{"Group3x2", 2, []pubsub.SubscribeOption{pubsub.Group("g"), pubsub.Concurrency(3)}},
		{"ClaimPending2", 1, []pubsub.SubscribeOption{pubsub.Group("g"), pubsub.Concurrency(2), pubsub.ClaimPending()}},
		{"OnDemand1", 1, []pubsub.SubscribeOption{pubsub.Group("g"), pubsub.Concurrency(1), pubsub.ReadOnDemand()}},
		{"OnDemand3", 1, []pubsub.SubscribeOption{pubsub.Group("g"), pubsub.Concurrency(3), pubsub.ReadOnDemand()}},
	}
	for bname, mk := range backends {
		for _, st := range setups {
			t.Run(bname+"/"+st.name, func(t *testing.T) {
				ps := mk(t)
				ctx := context.Background()
				cfg, _ := pubsub.ApplyOptions(st.opts...)
				var mu sync.Mutex
				attempts := map[string]int{}
				acks := map[string]int{}
				var over atomic.Int32
				var subs []pubsub.Subscription
				plan := func(id string) int { n, _ := strconv.Atoi(id); return n % 3 } // Goexits before the ack
				for m := range st.members {
					var running atomic.Int32
					opts := append([]pubsub.SubscribeOption{pubsub.RedeliveryDelay(time.Millisecond), pubsub.AckDeadline(time.Minute)}, st.opts...)
					sub, err := ps.Subscribe(ctx, "t", func(_ context.Context, e pubsub.Event) error {
						if n := running.Add(1); n > int32(cfg.Concurrency) {
							over.Store(n)
						}
						defer running.Add(-1)
						time.Sleep(time.Duration(m*100) * time.Microsecond)
						mu.Lock()
						attempts[e.ID]++
						exit := e.DeliveryAttempt <= plan(e.ID)
						if !exit {
							acks[e.ID]++
						}
						mu.Unlock()
						if exit {
							runtime.Goexit()
						}
						return nil
					}, opts...)
					if err != nil {
						t.Fatal(err)
					}
					subs = append(subs, sub)
				}
				publish := func(from, to int) {
					for i := from; i < to; i++ {
						if err := ps.Publish(ctx, "t", pubsub.Event{ID: strconv.Itoa(i), Type: "x"}); err != nil {
							t.Fatal(err)
						}
					}
					for _, s := range subs {
						if k, ok := s.(pubsub.Kicker); ok {
							k.Kick()
						}
					}
				}
				check := func(n int) {
					t.Helper()
					fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
					defer cancel()
					if err := ps.Flush(fctx); err != nil {
						t.Fatalf("Flush: %v", err)
					}
					// Flush does not wait for nacked events' redeliveries:
					// wait for every ack.
					for {
						mu.Lock()
						all := true
						for i := range n {
							all = all && acks[strconv.Itoa(i)] > 0
						}
						mu.Unlock()
						if all || fctx.Err() != nil {
							break
						}
						time.Sleep(5 * time.Millisecond)
					}
					time.Sleep(50 * time.Millisecond) // room for extra runs
					if err := ps.Flush(fctx); err != nil {
						t.Fatalf("Flush: %v", err)
					}
					mu.Lock()
					defer mu.Unlock()
					bad := 0
					for i := range n {
						id := strconv.Itoa(i)
						if attempts[id] != plan(id)+1 || acks[id] != 1 {
							if bad++; bad <= 5 {
								t.Errorf("event %s: %d attempts, %d acks; want %d and 1", id, attempts[id], acks[id], plan(id)+1)
							}
						}
					}
					if bad > 5 {
						t.Errorf("... %d events in all", bad)
					}
				}
				publish(0, 120)
				check(120)
				publish(120, 200) // the subscriptions still work, at full strength
				check(200)
				if n := over.Load(); n > 0 {
					t.Errorf("%d handlers ran at once, Concurrency %d", n, cfg.Concurrency)
				}
				for _, s := range subs {
					uctx, cancel := context.WithTimeout(ctx, 10*time.Second)
					if err := s.Unsubscribe(uctx); err != nil {
						t.Errorf("Unsubscribe: %v", err)
					}
					cancel()
				}
				_ = fmt.Sprint()
			})
		}
	}
}
