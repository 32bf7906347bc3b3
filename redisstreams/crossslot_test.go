package redisstreams

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/keys"
	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// TestClusterPublishForBesideOtherSlots: on a Cluster, a PublishFor
// coalesced into one pipeline with a publish to another slot succeeds, and
// so does that publish, directly and under concurrency. (A version that
// made such a pipeline a MULTI/EXEC failed both with CROSSSLOT: go-redis
// refuses a transaction across slots.)
func TestClusterPublishForBesideOtherSlots(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	c := cl.Client(t)
	b := psBackend(t, c, Options{})
	ctx := context.Background()

	// Two topics in different slots.
	ka, kb := b.keys.Stream("a"), b.keys.Stream("b")
	if keys.Slot(ka) == keys.Slot(kb) {
		t.Fatal("pick other topics")
	}
	f, _, _ := encodeEvent(pubsub.Event{ID: "x", Type: "t"})
	// What publishUnit's leader does with a batch of two queued publishes.
	ra := &pubReq{key: ka, fields: f, group: "g"}
	rb := &pubReq{key: kb, fields: f}
	b.bus.pipeline(ctx, []*pubReq{ra, rb})
	t.Logf("direct: PublishFor err=%v, Publish err=%v", ra.err, rb.err)
	if ra.err != nil || rb.err != nil {
		t.Errorf("a batch of a PublishFor and a Publish on another slot failed: %v / %v", ra.err, rb.err)
	}

	// The same through the public API, concurrently.
	var wg sync.WaitGroup
	var fails, cross atomic.Int64
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for j := 0; j < 100; j++ {
				var err error
				if i%2 == 0 {
					err = b.PublishFor(ctx, "a", "g", pubsub.Event{Type: "t"})
				} else {
					err = b.Publish(ctx, "b", pubsub.Event{Type: "t"})
				}
				if err != nil {
					fails.Add(1)
					if errors.Is(err, redis.ErrCrossSlot) || strings.Contains(err.Error(), "CROSSSLOT") {
						cross.Add(1)
					}
				}
			}
		}(i)
	}
	wg.Wait()
	t.Logf("concurrent: %d of 800 publishes failed, %d with CROSSSLOT", fails.Load(), cross.Load())
	if fails.Load() > 0 {
		t.Errorf("%d publishes failed (%d CROSSSLOT)", fails.Load(), cross.Load())
	}
}
