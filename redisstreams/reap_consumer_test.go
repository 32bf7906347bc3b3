package redisstreams

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// TestDeadMembersConsumerGoes: the consumer of a group member that died
// holding nothing (what a SIGKILLed process leaves: a consumer in the group
// that nobody will ever delete) is deleted by a live member once it has
// been idle for consumerReapIdle. A live member whose empty consumer is
// deleted that way loses nothing: its next read creates it again, and every
// event is still delivered.
func TestDeadMembersConsumerGoes(t *testing.T) {
	redistest.Require(t)
	old := consumerReapIdle
	consumerReapIdle = 300 * time.Millisecond
	t.Cleanup(func() { consumerReapIdle = old })
	srv := redistest.Start(t, redistest.Options{})
	c := srv.Client(t)
	ctx := context.Background()
	b := psBackend(t, c, Options{})
	key := b.keys.Stream("tp")
	if err := c.XGroupCreateMkStream(ctx, key, "g", "$").Err(); err != nil {
		t.Fatal(err)
	}
	// The dead member: it read an event, acked it, and died. (Redis
	// creates a consumer on its first read that returns an entry.)
	if err := b.Publish(ctx, "tp", pubsub.Event{ID: "before", Type: "t"}); err != nil {
		t.Fatal(err)
	}
	res, err := c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "dead-1", Streams: []string{key, ">"}, Count: 1, Block: -1}).Result()
	if err != nil || len(res) != 1 || len(res[0].Messages) != 1 {
		t.Fatalf("dead member's read: %v, %v", res, err)
	}
	if err := c.XAck(ctx, key, "g", res[0].Messages[0].ID).Err(); err != nil {
		t.Fatal(err)
	}

	var (
		mu    sync.Mutex
		got   = map[string]int{}
		byOne [2]int
	)
	handlerOf := func(i int) pubsub.Handler {
		return func(ctx context.Context, e pubsub.Event) error {
			mu.Lock()
			got[e.ID]++
			byOne[i]++
			mu.Unlock()
			return nil
		}
	}
	// A live member that looks for stale work often (AckDeadline 400ms)
	// and one in another Backend (another process) that stays idle.
	sub, err := b.Subscribe(ctx, "tp", handlerOf(0), pubsub.Group("g"), pubsub.AckDeadline(400*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	b2 := psBackend(t, c, Options{Prefix: b.opts.Prefix})
	sub2, err := b2.Subscribe(ctx, "tp", handlerOf(1), pubsub.Group("g"), pubsub.AckDeadline(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	live2 := sub2.(*groupSub).consumer

	consumers := func() []string {
		t.Helper()
		cs, err := c.XInfoConsumers(ctx, key, "g").Result()
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, ci := range cs {
			names = append(names, ci.Name)
		}
		return names
	}
	deadline := time.Now().Add(10 * time.Second)
	for slices.Contains(consumers(), "dead-1") {
		if time.Now().After(deadline) {
			t.Fatalf("the dead member's consumer is still in the group after 10s (reap idle %v): %q", consumerReapIdle, consumers())
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The second live member's consumer, once it got an event and went
	// idle holding nothing, goes the same way (it reads again only when
	// the shared reader rings it, or after BlockTime).
	for i := 0; ; i++ {
		mu.Lock()
		n2 := byOne[1]
		mu.Unlock()
		if n2 > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the second member got none of the warm-up events within 10s")
		}
		if err := b.Publish(ctx, "tp", pubsub.Event{ID: fmt.Sprint("w", i), Type: "t"}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if !slices.Contains(consumers(), live2) {
		t.Fatalf("the second member's consumer %s is not in the group after it got an event: %q", live2, consumers())
	}
	for slices.Contains(consumers(), live2) {
		if time.Now().After(deadline) {
			t.Fatalf("the idle member's empty consumer %s is still in the group after 10s: %q", live2, consumers())
		}
		time.Sleep(20 * time.Millisecond)
	}

	// Both live members still get every event, whether or not the idle
	// one's consumer was reaped meanwhile.
	const n = 200
	mu.Lock()
	warm := len(got)
	mu.Unlock()
	for i := range n {
		if err := b.Publish(ctx, "tp", pubsub.Event{ID: fmt.Sprint("e", i), Type: "t"}); err != nil {
			t.Fatal(err)
		}
	}
	deadline = time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		k := len(got) - warm
		mu.Unlock()
		if k == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d events delivered within 10s (per member %v; consumers %q)", k, n, byOne, consumers())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := sub.Unsubscribe(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sub2.Unsubscribe(ctx); err != nil {
		t.Fatal(err)
	}
	if got["before"] != 0 {
		t.Errorf("the event the dead member acked was delivered again %d times", got["before"])
	}
	if cs := consumers(); len(cs) != 0 {
		t.Errorf("consumers left after both members unsubscribed: %q", cs)
	}
}
