package redisstreams

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// TestReviewH66BacklogBlackHoleExpireWhenDrained: a group of two
// ExpireWhenDrained members (one on a NewURL client behind a proxy, one
// direct) works through a backlog of 3,000 PublishFor events; the proxied
// member's Redis is black-holed for longer than its ReadTimeout and the
// ack deadline, and it unsubscribes during the hole. Every event must be
// handled (none deleted with the stream by a drained expiry while unread or
// pending), and once all are acked the stream must go (the drained expiry).
func TestReviewH66BacklogBlackHoleExpireWhenDrained(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t, redistest.Options{})
	proxy := redistest.NewProxy(t, srv.Addr())
	ctx := context.Background()
	prefix := psPrefix()
	bA := urlBackend(t, "redis://"+proxy.Addr()+"/0", Options{Prefix: prefix})
	direct := srv.Client(t)
	bB := psBackend(t, direct, Options{Prefix: prefix})
	pub := psBackend(t, direct, Options{Prefix: prefix})

	const n = 3000
	var mu sync.Mutex
	seen := make(map[string]int)
	var handledA atomic.Int32
	holeAt := make(chan struct{})
	var holeOnce sync.Once
	handler := func(who string) pubsub.Handler {
		return func(ctx context.Context, e pubsub.Event) error {
			mu.Lock()
			seen[e.ID]++
			mu.Unlock()
			if who == "A" && handledA.Add(1) == 300 {
				holeOnce.Do(func() { close(holeAt) })
			}
			return nil
		}
	}
	opts := []pubsub.SubscribeOption{pubsub.Group("g"), pubsub.StartFrom(pubsub.Earliest),
		pubsub.Concurrency(4), pubsub.AckDeadline(2 * time.Second), pubsub.ExpireWhenDrained(time.Second)}
	// Fill the backlog before anyone reads.
	for i := range n {
		if err := pub.PublishFor(ctx, "t", "g", pubsub.Event{ID: fmt.Sprintf("e%04d", i), Type: "x"}); err != nil {
			t.Fatal(err)
		}
	}
	subA, err := bA.Subscribe(ctx, "t", handler("A"), opts...)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-holeAt:
	case <-time.After(60 * time.Second):
		t.Fatal("A handled fewer than 300 in 60s")
	}
	proxy.BlackHole()
	subB, err := bB.Subscribe(ctx, "t", handler("B"), opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer subB.Unsubscribe(ctx)
	uctx, cancel := context.WithTimeout(ctx, time.Second)
	uerr := subA.Unsubscribe(uctx)
	cancel()
	t.Logf("A: Unsubscribe during the hole = %v", uerr)
	time.Sleep(8 * time.Second) // the hole outlasts ReadTimeout (3s) and the ack deadline
	proxy.Restore()

	key := pub.keys.Stream("t")
	deadline := time.Now().Add(90 * time.Second)
	for {
		mu.Lock()
		got := len(seen)
		mu.Unlock()
		if got == n {
			break
		}
		if time.Now().After(deadline) {
			exists, _ := direct.Exists(ctx, key).Result()
			xlen, _ := direct.XLen(ctx, key).Result()
			var missing []string
			mu.Lock()
			for i := range n {
				if id := fmt.Sprintf("e%04d", i); seen[id] == 0 && len(missing) < 10 {
					missing = append(missing, id)
				}
			}
			mu.Unlock()
			t.Fatalf("%d of %d events handled after 90s (stream exists %d, length %d); missing e.g. %v", got, n, exists, xlen, missing)
		}
		time.Sleep(20 * time.Millisecond)
	}
	dup := 0
	mu.Lock()
	for _, c := range seen {
		if c > 1 {
			dup++
		}
	}
	mu.Unlock()
	t.Logf("all %d handled; %d more than once (at-least-once)", n, dup)
	// Every event handled: the stream goes once acked (drained expiry 1s).
	deadline = time.Now().Add(60 * time.Second)
	for {
		exists, err := direct.Exists(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if exists == 0 {
			break
		}
		if time.Now().After(deadline) {
			pend, _ := direct.XPending(ctx, key, "g").Result()
			ttl, _ := direct.PTTL(ctx, key).Result()
			t.Fatalf("stream still there 60s after every event was handled (pending %+v, ttl %v)", pend, ttl)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
