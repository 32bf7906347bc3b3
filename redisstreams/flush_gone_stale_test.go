package redisstreams

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// TestFlushStaleGoneToAfterRecreatedLower: the stream's last id is ahead of
// the server's clock (failover to a lagging server; modelled by a foreign
// XADD with a future id), so DeleteTopic leaves it emptied, keeping its last
// id F, and records F as gone while a group subscription keeps the key.
// Then the emptied key is removed by someone else (StreamIdleTTL, another
// process's deletion; modelled by DEL) and this Backend publishes "new": the
// recreated stream numbers it from the server's clock, below F. Flush waits
// until "new" is handled. Found by review 18 in c8c9cf1 (3 of 3 runs: a
// fan-out subscription that joined meanwhile took F as gone, and Flush
// returned before "new" was read); now a write sent after the last
// deletion that lands at or below the mark drops it (streamBus.wrote).
func TestFlushStaleGoneToAfterRecreatedLower(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	b, err := NewURL(ctx, srv.URL(), Options{Prefix: psPrefix()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	// Holds, once armed, the first XREAD reply carrying entries.
	gate := newSendGate(func(c redis.Cmder) bool {
		x, ok := c.(*redis.XStreamSliceCmd)
		if !ok {
			return false
		}
		for _, s := range x.Val() {
			if len(s.Messages) > 0 {
				return true
			}
		}
		return false
	})
	gate.after = true
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(gate.release) }) }
	t.Cleanup(release)
	b.client.AddHook(gate)
	rdb := srv.Client(t)
	key := b.keys.Stream("t")

	keep, err := b.Subscribe(ctx, "t", func(context.Context, pubsub.Event) error { return nil }, pubsub.Group("g"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = keep.Unsubscribe(context.Background()) })
	future := time.Now().Add(60 * time.Second).UnixMilli()
	if err := rdb.Do(ctx, "XADD", key, fmt.Sprintf("%d-0", future), "t", "y").Err(); err != nil {
		t.Fatal(err)
	}
	if err := b.DeleteTopic(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	if g := b.bus.goneUpTo(key); g == "" {
		t.Fatal("no deletion mark recorded: the scenario did not happen")
	}
	if err := rdb.Del(ctx, key).Err(); err != nil { // StreamIdleTTL / another process
		t.Fatal(err)
	}
	var handled atomic.Bool
	late, err := b.Subscribe(ctx, "t", func(ctx context.Context, e pubsub.Event) error {
		if e.Type == "new" {
			handled.Store(true)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = late.Unsubscribe(context.Background()) })
	time.Sleep(100 * time.Millisecond)
	gate.armed.Store(true)
	if err := b.Publish(ctx, "t", pubsub.Event{Type: "new"}); err != nil {
		t.Fatal(err)
	}
	gate.waitHeld(t, "XREAD of new")
	done := make(chan error, 1)
	go func() {
		fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		done <- b.Flush(fctx)
	}()
	select {
	case err := <-done:
		t.Fatalf("Flush = %v while the read of \"new\" is still held (handled=%v): it took \"new\" (below the deletion's last id) as deleted", err, handled.Load())
	case <-time.After(time.Second):
	}
	release()
	if err := <-done; err != nil {
		t.Fatalf("Flush = %v", err)
	}
	if !handled.Load() {
		t.Fatal("Flush returned nil before \"new\" was handled")
	}
}
