package redisstreams

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/pubsub"
)

// TestFlushGoneClearedKeepsDeletedTarget: review 19 of 1cb7b84. The
// stream's last id is ahead of the server's clock (a foreign entry at a
// future id F, written while the fan-out subscription's reader is held). "mid" is published while
// DeleteTopic's script is held (so DeleteTopic's forgetWrites does not
// cover it) and the reader's next XREAD is held (so "mid" is deleted
// unread): the deletion leaves the stream emptied with last id "mid", and
// marks "mid" gone. Then the key is removed (StreamIdleTTL / another
// process) and "new" is published: it lands below the mark, and wrote
// clears the mark and the subscription's gone entirely. Flush still
// targets "mid" (lastPub keeps the higher id), which the deletion took:
// it waits until its ctx ends.
func TestFlushGoneClearedKeepsDeletedTarget(t *testing.T) {
	srv, b := startURLBackend(t)
	ctx := context.Background()
	delGate := newSendGate(deleteTopicCall(true))
	readGate := newSendGate(func(c redis.Cmder) bool { return strings.EqualFold(c.Name(), "xread") })
	b.client.AddHook(delGate)
	b.client.AddHook(readGate)
	var mu sync.Mutex
	var seen []string
	sub, err := b.Subscribe(ctx, "t", func(ctx context.Context, e pubsub.Event) error {
		mu.Lock()
		seen = append(seen, e.Type)
		mu.Unlock()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe(context.Background()) })
	rdb := srv.Client(t)
	key := b.keys.Stream("t")
	// The subscription reads "old" and "pre"; its next XREAD is held, so it
	// never reads the foreign entry: its cursor stays below the server's clock.
	if err := b.Publish(ctx, "t", pubsub.Event{Type: "old"}); err != nil {
		t.Fatal(err)
	}
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	readGate.armed.Store(true)
	if err := b.Publish(ctx, "t", pubsub.Event{Type: "pre"}); err != nil {
		t.Fatal(err)
	}
	readGate.waitHeld(t, "the reader's next XREAD")
	future := time.Now().Add(60 * time.Second).UnixMilli()
	if err := rdb.Do(ctx, "XADD", key, fmt.Sprintf("%d-0", future), fieldVersion, codecVersion, fieldID, "f1", fieldType, "foreign").Err(); err != nil {
		t.Fatal(err)
	}
	deleteAcross(t, b, delGate, "mid", nil) // emptied (clock behind), "mid" unread
	if g := b.bus.goneUpTo(key); g == "" {
		t.Fatal("no deletion mark recorded: the scenario did not happen")
	}
	if err := rdb.Del(ctx, key).Err(); err != nil { // StreamIdleTTL / another process
		t.Fatal(err)
	}
	if err := b.Publish(ctx, "t", pubsub.Event{Type: "new"}); err != nil {
		t.Fatal(err)
	}
	close(readGate.release)
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	start := time.Now()
	err = b.Flush(fctx)
	mu.Lock()
	defer mu.Unlock()
	if err != nil {
		t.Fatalf("Flush = %v after %v (handled %v, target %q): it waited for \"mid\", which the deletion took unread", err, time.Since(start).Round(time.Millisecond), seen, b.bus.lastWrite(key))
	}
	if !slices.Contains(seen, "new") {
		t.Fatalf("Flush returned before \"new\" was handled (handled %v)", seen)
	}
}
