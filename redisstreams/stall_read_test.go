package redisstreams

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// TestStalledReadDeadLettersNothingUnrun: a Backend from NewURL (go-redis
// defaults), a group subscription with MaxDeliveries(1). The server stalls
// (SIGSTOP) while the subscription's XREADGROUP is on the wire; go-redis
// times out; when the server resumes it runs the buffered XREADGROUP whose
// reply nobody reads, delivering the entries to the consumer unseen. Found
// by review: go-redis retried the read, and the reclaim pass later claimed
// those entries as attempt 2 and, under MaxDeliveries(1), dead-lettered
// them although no handler ever ran them. Now reads are never retried by
// go-redis, and after a failed one the subscription looks for what it
// delivered all the same (recoverLost): every entry runs, none is
// dead-lettered.
func TestStalledReadDeadLettersNothingUnrun(t *testing.T) {
	t.Parallel()
	redistest.Require(t)
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	b := urlBackend(t, srv.URL(), Options{})

	var dead atomic.Int64
	countDeadLetters(t, b, "t", &dead)

	var ran atomic.Int64
	sub, err := b.Subscribe(ctx, "t", func(ctx context.Context, e pubsub.Event) error {
		ran.Add(1)
		return nil
	}, pubsub.Group("g"), pubsub.StartFrom(pubsub.Earliest), pubsub.ReadOnDemand(),
		pubsub.MaxDeliveries(1), pubsub.AckDeadline(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe(ctx)
	time.Sleep(200 * time.Millisecond) // first read done

	const n = 3
	publishXs(t, b, "t", n)
	srv.Pause(t)
	sub.(pubsub.Kicker).Kick()  // the read goes to a stopped server
	time.Sleep(7 * time.Second) // past go-redis's default ReadTimeout (5s)
	srv.Resume(t)
	// Keep kicking (a ReadOnDemand subscription reclaims while kicked).
	deadline := time.Now().Add(20 * time.Second)
	for ran.Load()+dead.Load() < n && time.Now().Before(deadline) {
		sub.(pubsub.Kicker).Kick()
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)
	t.Logf("handler ran %d, dead letters %d", ran.Load(), dead.Load())
	if ran.Load() != n {
		t.Errorf("handler ran %d of %d entries never run before; %d dead-lettered under MaxDeliveries(1)", ran.Load(), n, dead.Load())
	}
}

// TestStalledReadKeepsOrder: the same stall as above, on a subscription
// configured as the signals inbox is (Group, Earliest, ClaimPending,
// ReadOnDemand, Concurrency 1). Events e1..e3 published before the stall
// are taken by the XREADGROUP whose reply is lost; e4..e6 are published
// after it. All six must be handled in publish order as first attempts
// (before the fix: e2..e6, then e1 as a redelivery after AckDeadline).
func TestStalledReadKeepsOrder(t *testing.T) {
	t.Parallel()
	redistest.Require(t)
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	b := urlBackend(t, srv.URL(), Options{})
	got := make(chan pubsub.Event, 16)
	sub, err := b.Subscribe(ctx, "t", func(ctx context.Context, e pubsub.Event) error {
		got <- e
		return nil
	}, pubsub.Group("g"), pubsub.StartFrom(pubsub.Earliest), pubsub.ClaimPending(), pubsub.ReadOnDemand(),
		pubsub.AckDeadline(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe(ctx)
	time.Sleep(200 * time.Millisecond)
	for i := 1; i <= 3; i++ {
		if err := b.Publish(ctx, "t", pubsub.Event{Type: "e" + string(rune('0'+i))}); err != nil {
			t.Fatal(err)
		}
	}
	srv.Pause(t)
	sub.(pubsub.Kicker).Kick()
	time.Sleep(7 * time.Second)
	srv.Resume(t)
	time.Sleep(200 * time.Millisecond)
	for i := 4; i <= 6; i++ {
		if err := b.Publish(ctx, "t", pubsub.Event{Type: "e" + string(rune('0'+i))}); err != nil {
			t.Fatal(err)
		}
	}
	var order []string
	deadline := time.After(15 * time.Second)
	for len(order) < 6 {
		sub.(pubsub.Kicker).Kick()
		select {
		case e := <-got:
			order = append(order, e.Type+"#"+string(rune('0'+e.DeliveryAttempt)))
		case <-time.After(100 * time.Millisecond):
		case <-deadline:
			t.Fatalf("got only %v", order)
		}
	}
	t.Logf("handled (type#attempt): %v", order)
	want := []string{"e1#1", "e2#1", "e3#1", "e4#1", "e5#1", "e6#1"}
	for i := range want {
		if order[i] != want[i] {
			t.Errorf("handled %v, want %v (publish order, first attempts)", order, want)
			break
		}
	}
}
