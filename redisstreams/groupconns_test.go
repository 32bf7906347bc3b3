package redisstreams_test

import (
	"context"
	"fmt"
	"sync"
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
		_, n, err := redistest.ClientStats(ctx, admin)
		if err != nil {
			t.Fatal(err)
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

// A fan-out subscription that fills up while it catches up, on a stream
// whose shared read is also driven by a group subscription's bell (at the
// stream's end) and that keeps getting new entries, gets every entry: a
// read that left it out (it was full) must not hand it the entries after
// its gap once it has room again. (Found by review: it skipped tens of
// thousands of entries for good.)
func TestFanOutBesideGroupBellGetsEverything(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	b, err := redisstreams.NewURL(ctx, srv.URL(), redisstreams.Options{Prefix: "bell", Retention: pubsub.RetainAll})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	const backlog, fresh = 20_000, 2_000
	publish := func(n int, typ string) {
		var wg sync.WaitGroup
		var next atomic.Int64
		for range 16 {
			wg.Go(func() {
				for i := next.Add(1); i <= int64(n); i = next.Add(1) {
					if err := b.Publish(ctx, "bell.s", pubsub.Event{ID: fmt.Sprint(typ, i), Type: typ}); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
	}
	publish(backlog, "old")
	if _, err := b.Subscribe(ctx, "bell.s", func(context.Context, pubsub.Event) error { return nil }, pubsub.Group("g")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // the group hangs its bell at the end
	var seen sync.Map
	var n atomic.Int64
	all := make(chan struct{})
	if _, err := b.Subscribe(ctx, "bell.s", func(_ context.Context, e pubsub.Event) error {
		if _, dup := seen.LoadOrStore(e.ID, true); !dup && n.Add(1) == backlog+fresh {
			close(all)
		}
		return nil
	}, pubsub.StartFrom(pubsub.Earliest), pubsub.Concurrency(8)); err != nil {
		t.Fatal(err)
	}
	publish(fresh, "new") // while the fan-out catches up
	select {
	case <-all:
	case <-time.After(time.Minute):
		t.Fatalf("the fan-out subscription got %d of %d entries within 1m", n.Load(), backlog+fresh)
	}
}

// A group subscription waiting on its bell gets a new entry while a fan-out
// subscription on the same stream is still catching up from far behind
// (the shared read starts at the fan-out's cursor, below the bell): full
// batches ring every bell. BlockTime is a minute, so its safety timer
// cannot be what delivers it.
func TestGroupBellRingsWhileFanOutCatchesUp(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	b, err := redisstreams.NewURL(ctx, srv.URL(), redisstreams.Options{Prefix: "ring", BlockTime: time.Minute, Retention: pubsub.RetainAll})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	const backlog = 20_000
	var wg sync.WaitGroup
	var next atomic.Int64
	for range 16 {
		wg.Go(func() {
			for next.Add(1) <= backlog {
				if err := b.Publish(ctx, "ring.s", pubsub.Event{Type: "old"}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	got := make(chan int64, 1)
	var fanSeen atomic.Int64
	if _, err := b.Subscribe(ctx, "ring.s", func(_ context.Context, e pubsub.Event) error {
		if e.Type == "new" {
			got <- fanSeen.Load()
		}
		return nil
	}, pubsub.Group("g")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // the group read the backlog once and hung its bell at the end
	if _, err := b.Subscribe(ctx, "ring.s", func(context.Context, pubsub.Event) error {
		fanSeen.Add(1)
		return nil
	}, pubsub.StartFrom(pubsub.Earliest), pubsub.Concurrency(8)); err != nil {
		t.Fatal(err)
	}
	if err := b.Publish(ctx, "ring.s", pubsub.Event{Type: "new"}); err != nil {
		t.Fatal(err)
	}
	select {
	case at := <-got:
		t.Logf("the group got the new entry with the fan-out at %d of %d", at, backlog+1)
		if at > backlog/2 {
			t.Fatalf("the group got the new entry only when the fan-out had caught up (%d of %d): its bell did not ring on the full batches", at, backlog+1)
		}
	case <-time.After(time.Minute):
		t.Fatal("the group never got the new entry")
	}
}
