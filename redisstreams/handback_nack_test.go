package redisstreams

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// TestNackedEntryHandedBackOnStop: a group member that nacked an entry, due
// for a redelivery here, and then stops (Unsubscribe) hands it back to the
// group: another member gets it at once as its next attempt (2), not after
// the ack deadline (30s here), and once only; nothing stays pending, and the
// stopped member's consumer and the group's hand-back notice go. Three ways
// to nack: a Concurrency(1) handler that returned an error (its entry waits
// out the redelivery delay on the handler: retryInPlace), a Concurrency(2)
// one (it waits holding no handler: retryLater), and a handler that fails
// because the subscription stops under it. Three receivers: a live member
// on another Backend (another process: it learns of the hand-back from the
// group's notice key within a BlockTime), a live member on the same Backend
// (nudged at once), and a subscription that starts after the stop
// (`leasebus tail --group G --count N` run twice). Found by review: the
// Concurrency(1) nack and the failure at the stop were left pending on the
// stopped consumer until the ack deadline (29.7-30.0s here), the
// Concurrency(2) one was handed back but taken only at the receiver's
// periodic pass, half an ack deadline later (14.7-15.0s).
func TestNackedEntryHandedBackOnStop(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t, redistest.Options{})
	c := srv.Client(t)
	prefix := psPrefix()
	bA := psBackend(t, srv.Client(t), Options{Prefix: prefix})
	bOther := psBackend(t, srv.Client(t), Options{Prefix: prefix})
	const (
		deadline = 30 * time.Second
		bound    = 5 * time.Second
	)
	type nackKind struct {
		name        string
		concurrency int
		failAtStop  bool
	}
	kinds := []nackKind{
		{"NackConcurrency1", 1, false},
		{"NackConcurrency2", 2, false},
		{"FailsAsItStops", 1, true},
	}
	receivers := []string{"LiveMemberOtherBackend", "LiveMemberSameBackend", "NextSubscriber"}
	n := 0
	for _, k := range kinds {
		for _, recv := range receivers {
			t.Run(k.name+"/"+recv, func(t *testing.T) {
				n++
				topic := "hbn" + string(rune('a'+n))
				ctx := context.Background()
				key := bA.keys.Stream(topic)
				nacked := make(chan int, 4)
				a, err := bA.Subscribe(ctx, topic, func(hctx context.Context, e pubsub.Event) error {
					if k.failAtStop {
						nacked <- e.DeliveryAttempt
						<-hctx.Done()
						return hctx.Err()
					}
					nacked <- e.DeliveryAttempt
					return errors.New("nack")
				}, pubsub.Group("g"), pubsub.Concurrency(k.concurrency), pubsub.AckDeadline(deadline),
					pubsub.RedeliveryDelay(time.Minute))
				if err != nil {
					t.Fatal(err)
				}
				consumerA := a.(*groupSub).consumer
				if err := bA.Publish(ctx, topic, pubsub.Event{ID: "e1", Type: "e1"}); err != nil {
					t.Fatal(err)
				}
				select {
				case at := <-nacked:
					if at != 1 {
						t.Fatalf("A's delivery: attempt %d, want 1", at)
					}
				case <-time.After(5 * time.Second):
					t.Fatal("A never got e1")
				}

				var (
					mu  sync.Mutex
					got []int
				)
				first := make(chan time.Time, 1)
				h := func(_ context.Context, e pubsub.Event) error {
					mu.Lock()
					got = append(got, e.DeliveryAttempt)
					mu.Unlock()
					select {
					case first <- time.Now():
					default:
					}
					return nil
				}
				subscribeB := func() {
					rb := bOther
					if recv == "LiveMemberSameBackend" {
						rb = bA
					}
					sub, err := rb.Subscribe(ctx, topic, h, pubsub.Group("g"), pubsub.AckDeadline(deadline))
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { _ = sub.Unsubscribe(context.Background()) })
				}
				if recv != "NextSubscriber" {
					subscribeB()
					// Let it settle into its idle reads (its first one
					// has looked at the hand-back notice already).
					time.Sleep(300 * time.Millisecond)
				}
				stopped := time.Now()
				if err := a.Unsubscribe(ctx); err != nil {
					t.Fatal(err)
				}
				if recv == "NextSubscriber" {
					subscribeB()
				}
				var at time.Time
				select {
				case at = <-first:
				case <-time.After(deadline + 5*time.Second):
					t.Fatalf("e1 never redelivered")
				}
				took := at.Sub(stopped)
				t.Logf("e1 redelivered %v after A's Unsubscribe began", took.Round(time.Millisecond))
				if took > bound {
					t.Errorf("e1 redelivered %v after A stopped, want under %v (the ack deadline is %v)", took.Round(time.Millisecond), bound, deadline)
				}
				if err := bOther.Flush(ctx); err != nil {
					t.Fatal(err)
				}
				// Nothing pending, A's consumer gone, and no second delivery.
				for end := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
					sum, err := c.XPending(ctx, key, "g").Result()
					if err != nil {
						t.Fatal(err)
					}
					if sum.Count == 0 {
						break
					}
					if time.Now().After(end) {
						t.Fatalf("%d entries still pending: %+v", sum.Count, sum)
					}
				}
				noConsumer(t, c, key, "g", consumerA)
				// The hand-back notice went with A's consumer.
				if n, err := c.Exists(ctx, handBackMark(bA, topic, "g")).Result(); err != nil || n != 0 {
					t.Errorf("hand-back notice %s: exists %d (err %v), want it gone with A's consumer", handBackMark(bA, topic, "g"), n, err)
				}
				time.Sleep(500 * time.Millisecond)
				mu.Lock()
				defer mu.Unlock()
				if len(got) != 1 || got[0] != 2 {
					t.Errorf("deliveries after A stopped (attempts): %v, want [2]: one, the second attempt", got)
				}
			})
		}
	}
}
