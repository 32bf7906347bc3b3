package redisstreams_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
	"github.com/leasebus/leasebus/redisstreams"
)

// TestReadersRetireWithTheirLastSubscription: on a Ring every topic (hash
// tag) gets a shared reader of its own, as every hash slot does on
// Cluster. A reader whose last fan-out subscription or group bell left is
// stopped and forgotten: 300 subscriptions on distinct topics, each
// unsubscribed, leave no goroutine behind. Before, each left its reader's
// two goroutines until Close (review 20, helper 30: 7 goroutines before,
// 607 after). A topic subscribed again after its reader retired is read
// by a new one.
func TestReadersRetireWithTheirLastSubscription(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t, redistest.Options{})
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": srv.Addr()}})
	t.Cleanup(func() { _ = ring.Close() })
	ctx := context.Background()
	b, err := redisstreams.New(ring, redisstreams.Options{Prefix: "retire"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	nop := func(context.Context, pubsub.Event) error { return nil }
	// Warm up: the Backend's own goroutines (acker and the like) start.
	for _, opts := range [][]pubsub.SubscribeOption{nil, {pubsub.Group("g")}} {
		s0, err := b.Subscribe(ctx, "warm", nop, opts...)
		if err != nil {
			t.Fatal(err)
		}
		if err := s0.Unsubscribe(ctx); err != nil {
			t.Fatal(err)
		}
	}
	settled := func(limit int) int {
		n := runtime.NumGoroutine()
		for deadline := time.Now().Add(10 * time.Second); n > limit && time.Now().Before(deadline); n = runtime.NumGoroutine() {
			time.Sleep(10 * time.Millisecond)
		}
		return n
	}
	before := runtime.NumGoroutine()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond) // until the warm-up's goroutines ended
		n := runtime.NumGoroutine()
		if n == before {
			break
		}
		before = n
	}
	const topics = 150
	for i := range topics {
		for _, opts := range [][]pubsub.SubscribeOption{nil, {pubsub.Group("g")}} {
			sub, err := b.Subscribe(ctx, fmt.Sprint("run.", i), nop, opts...)
			if err != nil {
				t.Fatal(err)
			}
			if len(opts) > 0 { // a group rings its bell after its first read
				if err := b.Publish(ctx, fmt.Sprint("run.", i), pubsub.Event{Type: "x"}); err != nil {
					t.Fatal(err)
				}
				if err := b.Flush(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if err := sub.Unsubscribe(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if after := settled(before + 10); after > before+10 {
		t.Fatalf("%d goroutines before, %d after %d fan-out and %d group subscriptions on distinct topics, all unsubscribed", before, after, topics, topics)
	}

	// The topic's reader retired; a new subscription gets a new one.
	got := make(chan string, 1)
	sub, err := b.Subscribe(ctx, "run.0", func(_ context.Context, e pubsub.Event) error {
		select {
		case got <- e.ID:
		default:
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe(context.Background()) })
	if err := b.Publish(ctx, "run.0", pubsub.Event{ID: "again", Type: "x"}); err != nil {
		t.Fatal(err)
	}
	select {
	case id := <-got:
		if id != "again" {
			t.Fatalf("got %q, want the event published after subscribing again", id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a subscription made after its topic's reader retired got nothing within 10s")
	}
}

// TestReaderRetireRacesSubscribe: subscriptions come and go on one topic
// from 8 goroutines at once, so that a reader retires while another
// subscription is being attached; every subscription still gets the event
// published after it started. On a standalone client (NewURL: one reader
// for the Backend) and on a Ring (one per topic).
func TestReaderRetireRacesSubscribe(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	url, err := redisstreams.NewURL(ctx, srv.URL(), redisstreams.Options{Prefix: "churn"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = url.Close() })
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": srv.Addr()}})
	t.Cleanup(func() { _ = ring.Close() })
	rb, err := redisstreams.New(ring, redisstreams.Options{Prefix: "churnring"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rb.Close() })
	for name, b := range map[string]*redisstreams.Backend{"NewURL": url, "Ring": rb} {
		t.Run(name, func(t *testing.T) {
			errs := make(chan error, 8)
			for w := range 8 {
				go func() {
					errs <- func() error {
						for i := range 40 {
							id := fmt.Sprint(w, "-", i)
							got := make(chan struct{})
							sub, err := b.Subscribe(ctx, "c", func(_ context.Context, e pubsub.Event) error {
								if e.ID == id {
									close(got)
								}
								return nil
							})
							if err != nil {
								return err
							}
							if err := b.Publish(ctx, "c", pubsub.Event{ID: id, Type: "x"}); err != nil {
								return err
							}
							select {
							case <-got:
							case <-time.After(10 * time.Second):
								return fmt.Errorf("subscription %s did not get its event within 10s", id)
							}
							if err := sub.Unsubscribe(ctx); err != nil {
								return err
							}
						}
						return nil
					}()
				}()
			}
			for range 8 {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}
