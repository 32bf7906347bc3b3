package redisstreams

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// TestClusterPromoteHotSlotsExactlyOnce: 6 long-lived fan-out and group
// subscriptions on shared-poller slots of one master receive a steady
// flow while lane subscriptions come and go, so the hot shared slots are
// promoted to freed lanes (and new lane holders push later slots back to
// the poller) mid-flow; each event is delivered exactly once and Flush
// returns. Written by review (helper 6, 2026-11-27) of the lane promotion
// (promoteSlots); it passed 3 of 3 there.
func TestClusterPromoteHotSlotsExactlyOnce(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	c := cl.Client(t)
	b := psBackend(t, c, Options{})
	ctx := context.Background()
	_, topics := topicsOnMaster(t, c, b, "promo.t", 12)
	lanes, long := topics[:3], topics[3:9]
	extra := topics[9:]
	var laneSubs []pubsub.Subscription
	for _, tp := range lanes {
		s, err := b.Subscribe(ctx, tp, func(context.Context, pubsub.Event) error { return nil })
		if err != nil {
			t.Fatal(err)
		}
		laneSubs = append(laneSubs, s)
	}
	var mu sync.Mutex
	got := map[string]int{}
	for _, tp := range long {
		for _, opt := range [][]pubsub.SubscribeOption{nil, {pubsub.Group("g")}} {
			kind := "fan"
			if opt != nil {
				kind = "group"
			}
			if _, err := b.Subscribe(ctx, tp, func(_ context.Context, e pubsub.Event) error {
				mu.Lock()
				got[kind+"/"+e.ID]++
				mu.Unlock()
				return nil
			}, opt...); err != nil {
				t.Fatal(err)
			}
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		// Free lanes one by one, then take them again with other slots.
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			s := laneSubs[i%len(laneSubs)]
			if err := s.Unsubscribe(ctx); err != nil {
				t.Error(err)
				return
			}
			time.Sleep(time.Duration(i%4) * 5 * time.Millisecond)
			tp := extra[i%len(extra)]
			if i%2 == 0 {
				tp = lanes[i%len(lanes)]
			}
			ns, err := b.Subscribe(ctx, tp, func(context.Context, pubsub.Event) error { return nil })
			if err != nil {
				t.Error(err)
				return
			}
			laneSubs[i%len(laneSubs)] = ns
			time.Sleep(time.Duration(i%3) * 4 * time.Millisecond)
		}
	}()
	const events = 1500
	for i := range events {
		if err := b.Publish(ctx, long[i%len(long)], pubsub.Event{ID: fmt.Sprint(i), Type: "x"}); err != nil {
			t.Fatal(err)
		}
		if i%3 == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	close(stop)
	wg.Wait()
	fctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	start := time.Now()
	if err := b.Flush(fctx); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	t.Logf("Flush took %v", time.Since(start))
	mu.Lock()
	defer mu.Unlock()
	bad := 0
	for i := range events {
		for _, kind := range []string{"fan", "group"} {
			if k := got[fmt.Sprint(kind, "/", i)]; k != 1 {
				bad++
				if bad < 10 {
					t.Errorf("event %d delivered %d times to the %s subscription", i, k, kind)
				}
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d wrong deliveries", bad)
	}
}
