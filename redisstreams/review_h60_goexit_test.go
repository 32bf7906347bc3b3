package redisstreams

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasebus/leasebus/inmem"
	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// TestReviewH60GoexitStorm: many handlers end their goroutine
// (runtime.Goexit) at once, some twice for the same event, on every kind
// of subscription: each event is acked exactly once after exactly its
// planned attempts, Flush returns, no subscription runs more handlers at
// once than its Concurrency, and afterwards the subscription still takes
// new events with all its tokens back (group) or a zero busy count
// (fan-out) (review h60).
func TestReviewH60GoexitStorm(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	backends := map[string]func(t *testing.T) pubsub.PubSub{
		"redis": func(t *testing.T) pubsub.PubSub { return urlBackend(t, srv.URL(), Options{Prefix: psPrefix()}) },
		"inmem": func(t *testing.T) pubsub.PubSub {
			b := inmem.New()
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
				deadline := time.Now().Add(5 * time.Second)
				for _, s := range subs {
					switch x := s.(type) {
					case *groupSub:
						for len(x.tokens) != cap(x.tokens) && time.Now().Before(deadline) {
							time.Sleep(time.Millisecond)
						}
						if len(x.tokens) != cap(x.tokens) {
							t.Errorf("group member idle with %d of its %d tokens", len(x.tokens), cap(x.tokens))
						}
					case *fanSub:
						if b := x.busy.Load(); b != 0 {
							t.Errorf("fan-out subscription idle with busy %d", b)
						}
					}
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

// TestReviewH60GoexitAsMemberLeaves: a group handler that ends its
// goroutine as its member unsubscribes (or the Backend closes) fails as
// the subscription stops: the event goes back to the group at once, as
// the next attempt, and the other member runs it well before the
// AckDeadline; Unsubscribe returns nil, and after Close ErrClosed. On a
// Concurrency(1) member the Goexit comes on the first attempt or on the
// in-place retry (review h60).
func TestReviewH60GoexitAsMemberLeaves(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	backends := map[string]func(t *testing.T) (a, b pubsub.PubSub){
		"redis": func(t *testing.T) (pubsub.PubSub, pubsub.PubSub) {
			p := psPrefix()
			return urlBackend(t, srv.URL(), Options{Prefix: p}), urlBackend(t, srv.URL(), Options{Prefix: p})
		},
		"inmem": func(t *testing.T) (pubsub.PubSub, pubsub.PubSub) {
			b := inmem.New()
			t.Cleanup(func() { b.Close() })
			return b, b
		},
	}
	for bname, mk := range backends {
		for _, conc := range []int{1, 3} {
			for _, retry := range []bool{false, true} {
				for _, how := range []string{"Unsubscribe", "Close"} {
					name := fmt.Sprintf("%s/Concurrency%d/retry=%v/%s", bname, conc, retry, how)
					t.Run(name, func(t *testing.T) {
						if how == "Close" && bname == "inmem" {
							t.Skip("one inmem Backend: its Close stops both members")
						}
						psA, psB := mk(t)
						ctx := context.Background()
						opts := []pubsub.SubscribeOption{pubsub.Group("g"), pubsub.Concurrency(conc),
							pubsub.AckDeadline(time.Minute), pubsub.RedeliveryDelay(time.Millisecond)}
						entered := make(chan struct{}, 4)
						subA, err := psA.Subscribe(ctx, "t", func(ctx context.Context, e pubsub.Event) error {
							if retry && e.DeliveryAttempt == 1 {
								return fmt.Errorf("nack")
							}
							entered <- struct{}{}
							<-ctx.Done()
							runtime.Goexit()
							return nil
						}, opts...)
						if err != nil {
							t.Fatal(err)
						}
						if err := psA.Publish(ctx, "t", pubsub.Event{ID: "e", Type: "x"}); err != nil {
							t.Fatal(err)
						}
						select {
						case <-entered:
						case <-time.After(10 * time.Second):
							t.Fatal("A's handler never ran")
						}
						got := make(chan int, 4)
						subB, err := psB.Subscribe(ctx, "t", func(_ context.Context, e pubsub.Event) error {
							got <- e.DeliveryAttempt
							return nil
						}, opts...)
						if err != nil {
							t.Fatal(err)
						}
						defer subB.Unsubscribe(ctx)
						start := time.Now()
						uctx, cancel := context.WithTimeout(ctx, 10*time.Second)
						defer cancel()
						want := error(nil)
						if how == "Close" {
							if err := psA.Close(); err != nil {
								t.Errorf("Close: %v", err)
							}
							want = pubsub.ErrClosed
						}
						if err := subA.Unsubscribe(uctx); err != want {
							t.Errorf("Unsubscribe: %v, want %v", err, want)
						}
						wantAttempt := 2
						if retry {
							wantAttempt = 3
						}
						select {
						case a := <-got:
							if a != wantAttempt {
								t.Errorf("B ran attempt %d, want %d", a, wantAttempt)
							}
							if d := time.Since(start); d > 5*time.Second {
								t.Errorf("B ran it %v after A left", d)
							}
						case <-time.After(15 * time.Second):
							t.Fatalf("B never ran the event A's handler left by Goexit")
						}
					})
				}
			}
		}
	}
}

// TestReviewH60GoexitAfterShutdownGaveUp: a handler that ignores its ctx
// and ends its goroutine after Shutdown gave up on it: nothing panics or
// leaks, a later Close returns, and Unsubscribe returns ErrClosed
// (review h60).
func TestReviewH60GoexitAfterShutdownGaveUp(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	for _, conc := range []int{1, 3} {
		for _, kind := range []string{"FanOut", "Group"} {
			t.Run(fmt.Sprintf("%s/Concurrency%d", kind, conc), func(t *testing.T) {
				b := urlBackend(t, srv.URL(), Options{Prefix: psPrefix()})
				ctx := context.Background()
				opts := []pubsub.SubscribeOption{pubsub.Concurrency(conc), pubsub.RedeliveryDelay(time.Millisecond)}
				if kind == "Group" {
					opts = append(opts, pubsub.Group("g"))
				}
				entered := make(chan struct{}, 8)
				release := make(chan struct{})
				var calls atomic.Int32
				sub, err := b.Subscribe(ctx, "t", func(context.Context, pubsub.Event) error {
					calls.Add(1)
					entered <- struct{}{}
					<-release
					runtime.Goexit()
					return nil
				}, opts...)
				if err != nil {
					t.Fatal(err)
				}
				for i := range conc {
					if err := b.Publish(ctx, "t", pubsub.Event{ID: strconv.Itoa(i), Type: "x"}); err != nil {
						t.Fatal(err)
					}
				}
				for range conc {
					select {
					case <-entered:
					case <-time.After(10 * time.Second):
						t.Fatal("handlers never ran")
					}
				}
				sctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
				defer cancel()
				if err := b.Shutdown(sctx); err != context.DeadlineExceeded {
					t.Errorf("Shutdown: %v, want DeadlineExceeded", err)
				}
				close(release)
				done := make(chan error, 1)
				go func() { done <- b.Close() }()
				select {
				case err := <-done:
					if err != nil {
						t.Errorf("Close: %v", err)
					}
				case <-time.After(30 * time.Second):
					t.Fatal("Close hung after the Goexits")
				}
				uctx, ucancel := context.WithTimeout(ctx, 5*time.Second)
				defer ucancel()
				if err := sub.Unsubscribe(uctx); err != pubsub.ErrClosed {
					t.Errorf("Unsubscribe: %v, want ErrClosed", err)
				}
				if n := calls.Load(); n != int32(conc) {
					t.Errorf("%d handler calls, want %d (none after Shutdown gave up)", n, conc)
				}
			})
		}
	}
}

// TestReviewH60UnsubscribeRacesClose: Unsubscribe calls racing the
// Backend's Close each return nil (they stopped the subscription first) or
// ErrClosed (Close did), and every later call returns the same; a call
// with an ended ctx after the stop too (review h60).
func TestReviewH60UnsubscribeRacesClose(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	for round := range 4 {
		t.Run(strconv.Itoa(round), func(t *testing.T) {
			b := urlBackend(t, srv.URL(), Options{Prefix: psPrefix()})
			ctx := context.Background()
			var subs []pubsub.Subscription
			for i := range 20 {
				var opts []pubsub.SubscribeOption
				if i%2 == 1 {
					opts = append(opts, pubsub.Group("g"+strconv.Itoa(i)))
				}
				sub, err := b.Subscribe(ctx, "t"+strconv.Itoa(i%3), func(context.Context, pubsub.Event) error { return nil }, opts...)
				if err != nil {
					t.Fatal(err)
				}
				subs = append(subs, sub)
			}
			first := make([]error, len(subs))
			var wg sync.WaitGroup
			for i, s := range subs {
				wg.Go(func() {
					if round%2 == 1 {
						time.Sleep(time.Duration(i) * 100 * time.Microsecond)
					}
					first[i] = s.Unsubscribe(ctx)
				})
			}
			if err := b.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
			wg.Wait()
			ended, cancel := context.WithCancel(ctx)
			cancel()
			closed := 0
			for i, s := range subs {
				if first[i] != nil && first[i] != pubsub.ErrClosed {
					t.Errorf("sub %d: Unsubscribe racing Close: %v", i, first[i])
				}
				if first[i] == pubsub.ErrClosed {
					closed++
				}
				for _, c := range []context.Context{ctx, ended} {
					if err := s.Unsubscribe(c); err != first[i] {
						t.Errorf("sub %d: later Unsubscribe %v, first %v", i, err, first[i])
					}
				}
			}
			t.Logf("%d of %d stopped by Close", closed, len(subs))
		})
	}
}
