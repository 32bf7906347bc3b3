package redisstreams

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/redistest"
)

// TestExpireWhenDrainedLargeAckBatch: the acks of a
// pubsub.ExpireWhenDrained subscription that queued up while a write was
// held up (here a CLIENT PAUSE; a slow server or a failover in production)
// go out as one delete_drained.lua call per stream, however many there are.
// The script passed every id to XACK with unpack, and Lua's stack takes
// about 8000 values: with 20000 queued, each try failed with "too many
// results to unpack", the acker gave up after 8 tries, and every entry
// stayed pending, to be redelivered and handled again (plain XACK takes any
// number). Now they are all acked and the drained stream gets its expiry.
func TestExpireWhenDrainedLargeAckBatch(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	c := srv.Client(t)
	b := psBackend(t, c, Options{})
	ctx := context.Background()
	const (
		group = "owner"
		n     = 20000
	)
	key := b.keys.Stream("big")
	if err := c.XGroupCreateMkStream(ctx, key, group, "$").Err(); err != nil {
		t.Fatal(err)
	}
	pipe := c.Pipeline()
	for i := range n {
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: key, Values: []string{"i", fmt.Sprint(i)}})
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: group, Consumer: "c1", Streams: []string{key, ">"}, Count: n}).Result()
	if err != nil || len(res) != 1 || len(res[0].Messages) != n {
		t.Fatalf("XREADGROUP: %v (%d streams)", err, len(res))
	}
	// Hold the acker's first write, so that the others queue behind it.
	if err := c.Do(ctx, "client", "pause", 1000, "write").Err(); err != nil {
		t.Fatal(err)
	}
	for _, m := range res[0].Messages {
		b.bus.acks.add(key, group, m.ID, time.Minute, nil)
	}
	fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := b.bus.acks.flush(fctx, ""); err != nil {
		t.Fatal(err)
	}
	p, err := c.XPending(ctx, key, group).Result()
	if err != nil {
		t.Fatal(err)
	}
	if p.Count != 0 {
		t.Fatalf("%d of %d entries still pending after their acks were written", p.Count, n)
	}
	if v := c.PTTL(ctx, key).Val(); v <= 0 {
		t.Fatalf("PTTL %v of the drained stream, want an expiry", v)
	}
}
