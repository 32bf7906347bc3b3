package redisstreams

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// TestDeleteTopicClockBehindIds: a stream whose last id is ahead of the
// server's clock (a failover to a server whose clock lags, an RDB restored
// elsewhere, an NTP step back: XADD * then numbers entries from the last
// id). DeleteTopic must return at once, with the topic's events and groups
// gone; the key may stay, emptied, keeping its last id (so that fan-out
// readers skip nothing published later). Found by review 9 of 2026-11-22:
// DeleteTopic spun, one script a millisecond, until the clock passed the
// last id (5s deadline exceeded; `leasebus topics delete` hung).
func TestDeleteTopicClockBehindIds(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	b := urlBackend(t, srv.URL(), Options{})
	rdb := srv.Client(t)
	topic := "clock"
	sub, err := b.Subscribe(ctx, topic, func(ctx context.Context, e pubsub.Event) error { return nil }, pubsub.Group("g"))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Publish(ctx, topic, pubsub.Event{Type: "x"}); err != nil {
		t.Fatal(err)
	}
	key := b.keys.Stream(topic)
	future := time.Now().Add(60 * time.Second).UnixMilli()
	if err := rdb.Do(ctx, "XADD", key, fmt.Sprintf("%d-0", future), "t", "y").Err(); err != nil {
		t.Fatal(err)
	}
	_ = sub.Unsubscribe(ctx)
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	start := time.Now()
	if err := b.DeleteTopic(dctx, topic); err != nil {
		t.Fatalf("DeleteTopic = %v after %v; want nil", err, time.Since(start).Round(time.Millisecond))
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("DeleteTopic took %v", took)
	}
	if n, _ := rdb.XLen(ctx, key).Result(); n != 0 {
		t.Fatalf("%d entries left after DeleteTopic", n)
	}
	if gs, err := rdb.XInfoGroups(ctx, key).Result(); err == nil && len(gs) != 0 {
		t.Fatalf("groups left after DeleteTopic: %+v", gs)
	}
}
