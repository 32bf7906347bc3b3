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

// TestReviewH60GoexitInClaimer: a ClaimPending member takes over the
// deliveries a stuck member holds and its handler ends its goroutine on
// the first attempt of each: it runs each again (the next attempt) and
// acks it, and ends with all its tokens (review h60).
func TestReviewH60GoexitInClaimer(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	for name, mk := range map[string]func(t *testing.T) (pubsub.PubSub, pubsub.PubSub){
		"redis": func(t *testing.T) (pubsub.PubSub, pubsub.PubSub) {
			p := psPrefix()
			return urlBackend(t, srv.URL(), Options{Prefix: p}), urlBackend(t, srv.URL(), Options{Prefix: p})
		},
		"inmem": func(t *testing.T) (pubsub.PubSub, pubsub.PubSub) {
			b := inmem.New()
			t.Cleanup(func() { b.Close() })
			return b, b
		},
	} {
		for _, conc := range []int{1, 2} {
			t.Run(name+"/Concurrency"+strconv.Itoa(conc), func(t *testing.T) {
				psA, psB := mk(t)
				ctx := context.Background()
				release := make(chan struct{})
				entered := make(chan struct{}, 10)
				subA, err := psA.Subscribe(ctx, "t", func(ctx context.Context, e pubsub.Event) error {
					entered <- struct{}{}
					<-release
					return nil
				}, pubsub.Group("g"), pubsub.Concurrency(1), pubsub.AckDeadline(time.Minute))
				if err != nil {
					t.Fatal(err)
				}
				defer subA.Unsubscribe(ctx)
				const n = 4
				for i := range n {
					if err := psA.Publish(ctx, "t", pubsub.Event{ID: strconv.Itoa(i), Type: "x"}); err != nil {
						t.Fatal(err)
					}
				}
				<-entered
				time.Sleep(200 * time.Millisecond) // A reads the rest behind its stuck handler
				var mu sync.Mutex
				calls := map[string][]int{}
				acked := make(chan string, 3*n)
				subB, err := psB.Subscribe(ctx, "t", func(_ context.Context, e pubsub.Event) error {
					mu.Lock()
					calls[e.ID] = append(calls[e.ID], e.DeliveryAttempt)
					first := len(calls[e.ID]) == 1
					mu.Unlock()
					if first {
						runtime.Goexit()
					}
					acked <- e.ID
					return nil
				}, pubsub.Group("g"), pubsub.Concurrency(conc), pubsub.ClaimPending(), pubsub.AckDeadline(time.Minute), pubsub.RedeliveryDelay(time.Millisecond))
				if err != nil {
					t.Fatal(err)
				}
				defer subB.Unsubscribe(ctx)
				got := map[string]int{}
				timeout := time.After(20 * time.Second)
				for len(got) < n {
					select {
					case id := <-acked:
						got[id]++
					case <-timeout:
						mu.Lock()
						t.Fatalf("B acked %v of %d; calls %v", got, n, calls)
						mu.Unlock()
					}
				}
				close(release)
				time.Sleep(200 * time.Millisecond)
				mu.Lock()
				for id, as := range calls {
					if len(as) != 2 || as[1] != as[0]+1 {
						t.Errorf("event %s: B's attempts %v, want two in a row", id, as)
					}
				}
				mu.Unlock()
				if g, ok := subB.(*groupSub); ok {
					deadline := time.Now().Add(5 * time.Second)
					for len(g.tokens) != cap(g.tokens) && time.Now().Before(deadline) {
						time.Sleep(time.Millisecond)
					}
					if len(g.tokens) != cap(g.tokens) {
						t.Errorf("claimer idle with %d of %d tokens", len(g.tokens), cap(g.tokens))
					}
				}
			})
		}
	}
}
