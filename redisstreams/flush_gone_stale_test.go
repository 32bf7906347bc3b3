package redisstreams

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

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
// returned before "new" was read); now a write sent after the key's last
// deletion that lands at or below the mark drops it (streamBus.wrote).
//
// OtherTopicDeleted: a DeleteTopic of another topic ("u") runs while the
// reply of "new" is on its way; the mark is dropped all the same (review
// 19 of 1cb7b84, whose count of deletions covered every key: 3 of 3 runs).
func TestFlushStaleGoneToAfterRecreatedLower(t *testing.T) {
	for _, other := range []bool{false, true} {
		t.Run(map[bool]string{false: "Alone", true: "OtherTopicDeleted"}[other], func(t *testing.T) {
			flushStaleGoneTo(t, other)
		})
	}
}

func flushStaleGoneTo(t *testing.T, other bool) {
	srv, b := startURLBackend(t)
	ctx := context.Background()
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
	var pubGate *sendGate
	if other {
		// Holds, once armed, the XADD of "new" after its reply came back.
		pubGate = newSendGate(func(c redis.Cmder) bool {
			a := c.Args()
			return strings.EqualFold(c.Name(), "xadd") && len(a) > 1 && a[1] == b.keys.Stream("t")
		})
		pubGate.after = true
		b.client.AddHook(pubGate)
		if err := b.Publish(ctx, "u", pubsub.Event{Type: "other"}); err != nil {
			t.Fatal(err)
		}
	}

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
	if !other {
		if err := b.Publish(ctx, "t", pubsub.Event{Type: "new"}); err != nil {
			t.Fatal(err)
		}
	} else {
		pubGate.armed.Store(true)
		pubDone := make(chan error, 1)
		go func() { pubDone <- b.Publish(ctx, "t", pubsub.Event{Type: "new"}) }()
		pubGate.waitHeld(t, "XADD of new")
		// Another topic's deletion while "new"'s reply is on its way.
		time.Sleep(5 * time.Millisecond)
		if err := b.DeleteTopic(ctx, "u"); err != nil {
			t.Fatal(err)
		}
		close(pubGate.release)
		if err := <-pubDone; err != nil {
			t.Fatal(err)
		}
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
