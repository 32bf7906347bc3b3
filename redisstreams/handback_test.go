package redisstreams

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// A nacked entry waiting out its redelivery delay on member A is taken over
// by member B after A's AckDeadline; B is still running it when A
// unsubscribes. A's Unsubscribe must not take it back (it hands back only
// what is still its own), so member C, whose AckDeadline has not run out
// for B's delivery, does not run it at the same time as B. (Found by
// review: A handed it back unconditionally, idle a year, and C ran it
// concurrently with B.)
func TestUnsubscribeLeavesTakenOverNackedEntry(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t, redistest.Options{})
	cli := srv.Client(t)
	b := psBackend(t, cli, Options{})
	ctx := context.Background()
	var running, overlap, runs atomic.Int32
	aSeen := make(chan struct{}, 1)
	a, err := b.Subscribe(ctx, "t", func(context.Context, pubsub.Event) error {
		select {
		case aSeen <- struct{}{}:
		default:
		}
		return context.Canceled // nack
	}, pubsub.Group("g"), pubsub.Concurrency(2), pubsub.AckDeadline(200*time.Millisecond), pubsub.RedeliveryDelay(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Publish(ctx, "t", pubsub.Event{Type: "x"}); err != nil {
		t.Fatal(err)
	}
	<-aSeen
	slow := func(context.Context, pubsub.Event) error {
		runs.Add(1)
		if running.Add(1) > 1 {
			overlap.Add(1)
		}
		time.Sleep(1800 * time.Millisecond)
		running.Add(-1)
		return nil
	}
	bStarted := make(chan struct{})
	var once atomic.Bool
	if _, err := b.Subscribe(ctx, "t", func(ctx context.Context, e pubsub.Event) error {
		if once.CompareAndSwap(false, true) {
			close(bStarted)
		}
		return slow(ctx, e)
	}, pubsub.Group("g"), pubsub.Concurrency(2), pubsub.AckDeadline(200*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	<-bStarted
	if err := a.Unsubscribe(ctx); err != nil {
		t.Fatal(err)
	}
	pend, err := cli.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: b.keys.Stream("t"), Group: "g", Start: "-", End: "+", Count: 10}).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pend {
		t.Logf("after A's Unsubscribe: pending %s on %s, idle %v, delivered %d times", p.ID, p.Consumer, p.Idle, p.RetryCount)
	}
	if _, err := b.Subscribe(ctx, "t", slow, pubsub.Group("g"), pubsub.Concurrency(2), pubsub.AckDeadline(2*time.Second)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2500 * time.Millisecond)
	if overlap.Load() > 0 {
		t.Fatalf("the entry ran on two members at once (%d runs)", runs.Load())
	}
}
