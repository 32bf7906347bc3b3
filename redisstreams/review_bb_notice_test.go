package redisstreams

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// TestReviewBBNoticeKeptWhileHandedBackEntriesWait (review BB): two
// members of a group, each on a Backend of its own (two processes), stop
// one after the other and hand back what they nacked and read: D first (e1,
// the notice names D), then A (e2 and e3, the older entries; the notice now
// names A). Two live members of other processes, B and P, each learn of it
// from the notice within their BlockTime (B's 200ms, P's 3s). B, which
// looks first, takes the two oldest handed-back entries (its two free
// slots: Concurrency 1, BatchSize 1; its handler holds the first), e2 and
// e3, all that A's consumer held, and deletes that consumer;
// delete_consumer.lua deleted the notice with it, because it named A,
// although D's e1 was still handed back and unclaimed. P, idle, then read
// no notice (a missing key is no change) and took e1 only at its periodic
// pass, half an ack deadline later (14.7s here), while its handler was
// free all along: the promise that another member gets each entry
// promptly (within a BlockTime) did not hold. Should P look first, the
// roles swap and the outcome is the same; should both look within the same
// few milliseconds, the one whose handler is held may take e1 into its
// read-ahead queue (a rare flake, not what this test is about).
func TestReviewBBNoticeKeptWhileHandedBackEntriesWait(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t, redistest.Options{})
	c := srv.Client(t)
	prefix := psPrefix()
	const (
		deadline = 30 * time.Second
		block    = 3 * time.Second // P's: B's is shorter, so B looks first
		bound    = 5 * time.Second
	)
	opts := Options{Prefix: prefix, BatchSize: 1, BlockTime: block}
	bA := psBackend(t, srv.Client(t), opts)
	bD := psBackend(t, srv.Client(t), opts)
	bB := psBackend(t, srv.Client(t), Options{Prefix: prefix, BatchSize: 1, BlockTime: 200 * time.Millisecond})
	bP := psBackend(t, srv.Client(t), opts)
	ctx := context.Background()
	topic := "rbbnotice"
	key := bA.keys.Stream(topic)

	nacked := make(chan string, 8)
	nack := func(_ context.Context, e pubsub.Event) error {
		nacked <- e.ID
		return errors.New("nack")
	}
	stopper := func(b *Backend, extra ...pubsub.SubscribeOption) pubsub.Subscription {
		sub, err := b.Subscribe(ctx, topic, nack, append([]pubsub.SubscribeOption{pubsub.Group("g"),
			pubsub.AckDeadline(deadline), pubsub.RedeliveryDelay(time.Minute)}, extra...)...)
		if err != nil {
			t.Fatal(err)
		}
		return sub
	}
	awaitNack := func(id string) {
		t.Helper()
		select {
		case got := <-nacked:
			if got != id {
				t.Fatalf("nacked %s, want %s", got, id)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s never delivered", id)
		}
	}
	pendingOn := func(consumer string, want int) {
		t.Helper()
		for end := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			p, err := c.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: key, Group: "g", Start: "-", End: "+", Count: 100, Consumer: consumer}).Result()
			if err != nil {
				t.Fatal(err)
			}
			if len(p) == want {
				return
			}
			if time.Now().After(end) {
				t.Fatalf("%d entries pending on %s, want %d", len(p), consumer, want)
			}
		}
	}

	// A reads e2 and e3 (the oldest), nacks e2 and rests on it, e3 waits
	// unstarted; D reads e1 (A has no free slot) and nacks it.
	for _, id := range []string{"e2", "e3"} {
		if err := bA.Publish(ctx, topic, pubsub.Event{ID: id, Type: id}); err != nil {
			t.Fatal(err)
		}
	}
	a := stopper(bA, pubsub.StartFrom(pubsub.Earliest))
	awaitNack("e2")
	pendingOn(a.(*groupSub).consumer, 2)
	d := stopper(bD)
	if err := bA.Publish(ctx, topic, pubsub.Event{ID: "e1", Type: "e1"}); err != nil {
		t.Fatal(err)
	}
	awaitNack("e1")
	pendingOn(d.(*groupSub).consumer, 1)

	// B and P: live members of two other processes, each with a handler
	// that holds what it gets until the end of the test.
	type delivery struct {
		who, id string
		attempt int
		at      time.Time
	}
	var (
		mu  sync.Mutex
		got []delivery
	)
	e1 := make(chan delivery, 1)
	release := make(chan struct{})
	live := func(b *Backend, who string) {
		sub, err := b.Subscribe(ctx, topic, func(_ context.Context, e pubsub.Event) error {
			dl := delivery{who, e.ID, e.DeliveryAttempt, time.Now()}
			mu.Lock()
			got = append(got, dl)
			mu.Unlock()
			if e.ID == "e1" {
				e1 <- dl
			}
			<-release
			return nil
		}, pubsub.Group("g"), pubsub.AckDeadline(deadline))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe(context.Background()) })
	}
	live(bB, "B")
	live(bP, "P")
	t.Cleanup(func() { close(release) }) // runs before the Unsubscribes
	time.Sleep(300 * time.Millisecond)

	stopped := time.Now()
	if err := d.Unsubscribe(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Unsubscribe(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case dl := <-e1:
		took := dl.at.Sub(stopped)
		t.Logf("e1 reached %s %v after the stops (attempt %d)", dl.who, took.Round(time.Millisecond), dl.attempt)
		if took > bound {
			t.Errorf("e1 reached %s %v after the stops, want within %v (BlockTime %v)", dl.who, took.Round(time.Millisecond), bound, block)
		}
		if dl.attempt != 2 {
			t.Errorf("e1 attempt %d, want 2", dl.attempt)
		}
	case <-time.After(deadline):
		pend, _ := c.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: key, Group: "g", Start: "-", End: "+", Count: 100}).Result()
		notice, nerr := c.Get(ctx, handBackMark(bA, topic, "g")).Result()
		t.Fatalf("e1 never redelivered; pending %+v; notice %q (%v)", pend, notice, nerr)
	}
	mu.Lock()
	t.Logf("deliveries: %+v", got)
	mu.Unlock()
}
