package redisstreams

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// TestSameConsumerNameTwoBackends: two Backends given the same
// Options.Consumer (two processes started with one configuration) are two
// consumers of a group: each entry is pending on the one that read it, and
// one Backend's unsubscribe and cleanup leave the other's pending entries
// alone, to be acked by their reader.
func TestSameConsumerNameTwoBackends(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	ctx := t.Context()
	admin := srv.Client(t)
	prefix := psPrefix()
	a := psBackend(t, srv.Client(t), Options{Prefix: prefix, Consumer: "dup"})
	b := psBackend(t, srv.Client(t), Options{Prefix: prefix, Consumer: "dup"})
	if a.consumer == b.consumer {
		t.Fatalf("both Backends use consumer prefix %q", a.consumer)
	}
	key := a.keys.Stream("jobs")

	// Each member's handler holds its first delivery until released.
	release := make(chan struct{})
	var once sync.Once
	releaseAll := func() { once.Do(func() { close(release) }) }
	t.Cleanup(releaseAll) // runs before the Backends' Close
	var mu sync.Mutex
	got := map[string]int{}
	member := func(name string) pubsub.Handler {
		return func(ctx context.Context, e pubsub.Event) error {
			mu.Lock()
			got[name]++
			mu.Unlock()
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	if _, err := a.Subscribe(ctx, "jobs", member("a"), pubsub.Group("g")); err != nil {
		t.Fatal(err)
	}
	subB, err := b.Subscribe(ctx, "jobs", member("b"), pubsub.Group("g"))
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		mu.Lock()
		both := got["a"] > 0 && got["b"] > 0
		mu.Unlock()
		if both {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("deliveries %v: want both members to have one", got)
		}
		if err := a.Publish(ctx, "jobs", pubsub.Event{Type: "job"}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}

	cons, err := admin.XInfoConsumers(ctx, key, "g").Result()
	if err != nil {
		t.Fatal(err)
	}
	pendingOf := func(cons []redis.XInfoConsumer, prefix string) (n int64, found bool) {
		for _, c := range cons {
			if strings.HasPrefix(c.Name, prefix+"-") {
				return c.Pending, true
			}
		}
		return 0, false
	}
	if len(cons) != 2 || cons[0].Name == cons[1].Name {
		t.Fatalf("consumers %+v, want two distinct ones", cons)
	}
	for _, c := range cons {
		if !strings.HasPrefix(c.Name, "dup-") {
			t.Errorf("consumer %q does not start with the configured name", c.Name)
		}
	}
	pendA, _ := pendingOf(cons, a.consumer)
	if pendA < 1 {
		t.Fatalf("consumers %+v: a has nothing pending, want its running entry", cons)
	}

	if err := subB.Unsubscribe(ctx); err != nil {
		t.Fatal(err)
	}
	cons, err = admin.XInfoConsumers(ctx, key, "g").Result()
	if err != nil {
		t.Fatal(err)
	}
	if n, ok := pendingOf(cons, a.consumer); !ok || n != pendA {
		t.Fatalf("after b unsubscribed: consumers %+v, want a's with its %d pending entries", cons, pendA)
	}
	releaseAll()
	if err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	cons, err = admin.XInfoConsumers(ctx, key, "g").Result()
	if err != nil {
		t.Fatal(err)
	}
	if n, ok := pendingOf(cons, a.consumer); ok && n != 0 {
		t.Fatalf("after a's handler returned: consumers %+v, want a's entries acked", cons)
	}
}
