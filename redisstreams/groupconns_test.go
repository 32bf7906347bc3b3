package redisstreams_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
	"github.com/leasebus/leasebus/redisstreams"
)

// TestGroupSubscriptionsShareOneReader: 500 group subscriptions (plain, not
// ReadOnDemand) on 500 topics, on a NewURL client (go-redis's default pool
// of 10 per GOMAXPROCS), hold at most one connection blocked in a read —
// the Backend's shared reader, which rings each subscription when its
// stream gets a new entry — and every event published to every topic is
// delivered once.
func TestGroupSubscriptionsShareOneReader(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t, redistest.Options{})
	admin := srv.Client(t)
	ctx := context.Background()
	b, err := redisstreams.NewURL(ctx, srv.URL(), redisstreams.Options{Prefix: "conns"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	const topics, rounds = 500, 3
	var got atomic.Int64
	done := make(chan struct{})
	for i := range topics {
		_, err := b.Subscribe(ctx, fmt.Sprint("conns.t", i), func(context.Context, pubsub.Event) error {
			if got.Add(1) == topics*rounds {
				close(done)
			}
			return nil
		}, pubsub.Group("g"))
		if err != nil {
			t.Fatal(err)
		}
	}
	blocked := func() int {
		list, err := admin.ClientList(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, f := range strings.Fields(list) {
			if flags, ok := strings.CutPrefix(f, "flags="); ok && strings.Contains(flags, "b") {
				n++
			}
		}
		return n
	}
	most := 0
	for r := range rounds {
		for i := range topics {
			if err := b.Publish(ctx, fmt.Sprint("conns.t", i), pubsub.Event{ID: fmt.Sprint(r, "-", i), Type: "x"}); err != nil {
				t.Fatal(err)
			}
		}
		most = max(most, blocked())
	}
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatalf("%d of %d events delivered within 1m", got.Load(), topics*rounds)
	}
	most = max(most, blocked())
	t.Logf("%d group subscriptions: %d events delivered; at most %d connections blocked in a read", topics, got.Load(), most)
	if most > 1 {
		t.Fatalf("%d connections blocked in reads for %d group subscriptions, want at most 1 (the shared reader)", most, topics)
	}
	if n := got.Load(); n != topics*rounds {
		t.Fatalf("%d deliveries, want %d", n, topics*rounds)
	}
}
