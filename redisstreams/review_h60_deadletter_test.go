package redisstreams

import (
	"context"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/leasebus/leasebus/inmem"
	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// TestReviewH60GoexitDeadLettersEverywhere: with MaxDeliveries(2), events
// whose handler ends its goroutine on every attempt are dead-lettered
// after exactly 2 calls, once each, on every kind of subscription
// (Concurrency 1 and 3, two members, ClaimPending, ReadOnDemand), beside
// events acked at once (review h60).
func TestReviewH60GoexitDeadLettersEverywhere(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	backends := map[string]func(t *testing.T) pubsub.PubSub{
		"redis": func(t *testing.T) pubsub.PubSub { return urlBackend(t, srv.URL(), Options{Prefix: psPrefix()}) },
		"inmem": func(t *testing.T) pubsub.PubSub { b := inmem.New(); t.Cleanup(func() { b.Close() }); return b },
	}
	setups := map[string]struct {
		members int
		opts    []pubsub.SubscribeOption
	}{
		"FanOut1":   {1, nil},
		"FanOut3":   {1, []pubsub.SubscribeOption{pubsub.Concurrency(3)}},
		"Group1":    {1, []pubsub.SubscribeOption{pubsub.Group("g")}},
		"Group3x2":  {2, []pubsub.SubscribeOption{pubsub.Group("g"), pubsub.Concurrency(3)}},
		"Claim2":    {1, []pubsub.SubscribeOption{pubsub.Group("g"), pubsub.Concurrency(2), pubsub.ClaimPending()}},
		"OnDemand1": {1, []pubsub.SubscribeOption{pubsub.Group("g"), pubsub.ReadOnDemand()}},
	}
	for bname, mk := range backends {
		for sname, st := range setups {
			t.Run(bname+"/"+sname, func(t *testing.T) {
				ps := mk(t)
				ctx := context.Background()
				var mu sync.Mutex
				calls := map[string]int{}
				acks := map[string]int{}
				dead := map[string]int{}
				deadAttempts := map[string]string{}
				dsub, err := ps.Subscribe(ctx, pubsub.DeadLetterTopic("t"), func(_ context.Context, e pubsub.Event) error {
					mu.Lock()
					dead[e.ID]++
					deadAttempts[e.ID] = e.Metadata[pubsub.MetaDeadAttempts]
					mu.Unlock()
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				defer dsub.Unsubscribe(ctx)
				var subs []pubsub.Subscription
				for range st.members {
					opts := append([]pubsub.SubscribeOption{pubsub.MaxDeliveries(2), pubsub.RedeliveryDelay(time.Millisecond), pubsub.AckDeadline(time.Minute)}, st.opts...)
					sub, err := ps.Subscribe(ctx, "t", func(_ context.Context, e pubsub.Event) error {
						n, _ := strconv.Atoi(e.ID)
						mu.Lock()
						calls[e.ID]++
						if n%3 != 2 {
							acks[e.ID]++
						}
						mu.Unlock()
						if n%3 == 2 {
							runtime.Goexit()
						}
						return nil
					}, opts...)
					if err != nil {
						t.Fatal(err)
					}
					defer sub.Unsubscribe(ctx)
					subs = append(subs, sub)
				}
				const n = 30
				for i := range n {
					if err := ps.Publish(ctx, "t", pubsub.Event{ID: strconv.Itoa(i), Type: "x"}); err != nil {
						t.Fatal(err)
					}
				}
				for _, s := range subs {
					if k, ok := s.(pubsub.Kicker); ok {
						k.Kick()
					}
				}
				deadline := time.Now().Add(30 * time.Second)
				for {
					mu.Lock()
					nd, na := len(dead), len(acks)
					mu.Unlock()
					if nd >= n/3 && na >= n-n/3 || time.Now().After(deadline) {
						break
					}
					time.Sleep(5 * time.Millisecond)
				}
				time.Sleep(100 * time.Millisecond)
				mu.Lock()
				defer mu.Unlock()
				for i := range n {
					id := strconv.Itoa(i)
					if i%3 == 2 {
						if calls[id] != 2 || dead[id] != 1 || deadAttempts[id] != "2" {
							t.Errorf("event %s: %d calls, %d dead letters (attempts %q); want 2, 1, \"2\"", id, calls[id], dead[id], deadAttempts[id])
						}
					} else if calls[id] != 1 || acks[id] != 1 || dead[id] != 0 {
						t.Errorf("event %s: %d calls, %d acks, %d dead letters; want 1, 1, 0", id, calls[id], acks[id], dead[id])
					}
				}
			})
		}
	}
}
