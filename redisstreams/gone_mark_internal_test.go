package redisstreams

import (
	"context"
	"testing"

	"github.com/leasebus/leasebus/pubsub"
)

// TestStaleMarkSparesNewerDeletion replays, step by step, a write that
// shows a deletion mark stale (it landed at or below the mark after the
// stream was recreated lower) while a second DeleteTopic of the same key
// runs between the write's two steps: the write drops the first mark, the
// second deletion marks its own last id on the subscription, and the
// write's clearing of the subscriptions' marks must leave that newer one.
// Before, it cleared every mark covering the written id (review 19's
// untested suspicion; too small a window to hit with hooks).
func TestStaleMarkSparesNewerDeletion(t *testing.T) {
	_, b := startURLBackend(t)
	ctx := context.Background()
	sub, err := b.Subscribe(ctx, "t", func(context.Context, pubsub.Event) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe(context.Background()) })
	f := sub.(*fanSub)
	key := b.keys.Stream("t")
	s := &b.bus

	s.deletedUpTo(key, "100-0") // the first deletion, its last id ahead of the clock
	seq := s.deletions()        // a write sent after it
	markSeq, stale := s.recordWrite(key, "50-0", seq)
	if !stale {
		t.Fatal("a write sent after the deletion, landing below its mark, did not show the mark stale")
	}
	s.deletedUpTo(key, "200-0") // a second deletion of the key, between the write's two steps
	s.clearGone(key, "50-0", markSeq)

	f.r.mu.Lock()
	gone := f.gone
	f.r.mu.Unlock()
	if gone != "200-0" {
		t.Fatalf("subscription's deletion mark = %q after the stale write, want the second deletion's 200-0", gone)
	}
	if g := s.goneUpTo(key); g != "200-0" {
		t.Fatalf("key's deletion mark = %q, want 200-0", g)
	}

	// Without a newer deletion, the stale write clears the mark it dropped.
	seq = s.deletions()
	markSeq, stale = s.recordWrite(key, "150-0", seq)
	if !stale {
		t.Fatal("second stale write not seen")
	}
	s.clearGone(key, "150-0", markSeq)
	f.r.mu.Lock()
	gone = f.gone
	f.r.mu.Unlock()
	if gone != "" {
		t.Fatalf("subscription's deletion mark = %q after the stale write, want none", gone)
	}
}
