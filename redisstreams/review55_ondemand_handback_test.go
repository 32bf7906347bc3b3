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

// TestReview55OnDemandHandBackStrandsEvents: pubsub.ReadOnDemand: "what it
// [a backend] must never do is miss an event published before a Kick";
// "Redeliveries (nacks, AckDeadline take-overs, ClaimPending) are
// unaffected". pubsub.AckDeadline: "a group member whose every handler runs
// longer than d also hands back the events it holds and has not started".
//
// The group's one member reads on demand. Its handler runs e0 for 1.5s
// (ack deadline 300ms); e1 and e2 are published and kicked meanwhile, and
// read ahead. refreshQueued hands e1 and e2 back (handBackQueued):
// hand_back.lua leaves them pending on the same consumer, idle a year.
// When e0's handler returns, it drops them (lost), and nothing takes them
// again: the member's reclaim pass runs only when kicked (reclaimPass), and
// nudgeGroup nudges the group's other members, not this one. So e1 and e2,
// published before a Kick, are not delivered until some later Kick (or a
// Flush, which kicks). Before the hand-back they ran right after e0.
func TestReview55OnDemandHandBackStrandsEvents(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	b := urlBackend(t, srv.URL(), Options{Prefix: psPrefix()})
	ctx := context.Background()
	var mu sync.Mutex
	got := map[string]time.Time{}
	started := make(chan struct{}, 1)
	var e0Done time.Time
	sub, err := b.Subscribe(ctx, "t", func(ctx context.Context, e pubsub.Event) error {
		if e.ID == "e0" {
			started <- struct{}{}
			time.Sleep(1500 * time.Millisecond)
			mu.Lock()
			e0Done = time.Now()
			mu.Unlock()
		}
		mu.Lock()
		got[e.ID] = time.Now()
		mu.Unlock()
		return nil
	}, pubsub.Group("g"), pubsub.ReadOnDemand(), pubsub.AckDeadline(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe(ctx)
	k := sub.(pubsub.Kicker)
	if err := b.Publish(ctx, "t", pubsub.Event{ID: "e0", Type: "x"}); err != nil {
		t.Fatal(err)
	}
	k.Kick()
	select {
	case <-started:
	case <-time.After(5 * time.Second):
		t.Fatal("e0 not delivered")
	}
	for i := 1; i <= 2; i++ {
		if err := b.Publish(ctx, "t", pubsub.Event{ID: fmt.Sprint("e", i), Type: "x"}); err != nil {
			t.Fatal(err)
		}
	}
	k.Kick() // the last Kick: e1 and e2 were published before it
	deadline := time.Now().Add(6 * time.Second)
	for time.Now().Before(deadline) {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n == 3 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("delivered %v; e0 returned at %v", got, e0Done.Format("15:04:05.000"))
	for _, id := range []string{"e1", "e2"} {
		if _, ok := got[id]; !ok {
			t.Errorf("%s, published before the last Kick, not delivered %v after e0's handler returned (6s after the Kick)", id, time.Since(e0Done).Round(100*time.Millisecond))
		}
	}
}
