package redisstreams

import (
	"context"
	"math/rand"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// TestGroupBacklogMatchesEntriesLeft: random publish_for / read+ack / XDEL /
// trim on one stream. Whenever an entry is left after the group's last
// delivered id (a queued signal), GroupBacklog must not say Lag <= 0 with
// Pending 0 (afterRelease would then not take the thread), and
// DeleteTopicIfDrained must not delete the stream; and where no entry is
// left, Lag must be 0 (the server's lag stayed above zero after XDEL and
// XTRIM, which made an idle thread's released tenures start new ones:
// TestKeptInboxPurgedQueueNoTenures).
func TestGroupBacklogMatchesEntriesLeft(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	c := srv.Client(t)
	b := psBackend(t, c, Options{})
	ctx := context.Background()
	const topic, group = "t", "g"
	key := b.keys.Stream(topic)
	for seed := int64(0); seed < 300; seed++ {
		r := rand.New(rand.NewSource(seed))
		c.Del(ctx, key)
		var log []string
		for step := 0; step < 40; step++ {
			ops := []int{0, 1, 2, 3, 4, 5}
			switch op := ops[r.Intn(len(ops))]; op {
			case 0, 1:
				if err := b.PublishFor(ctx, topic, group, pubsub.Event{Type: "x"}); err != nil {
					t.Fatal(err)
				}
				log = append(log, "pub")
			case 2:
				res, err := c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: group, Consumer: "c", Streams: []string{key, ">"}, Count: int64(1 + r.Intn(2)), Block: -1}).Result()
				if err == nil {
					for _, m := range res[0].Messages {
						c.XAck(ctx, key, group, m.ID)
					}
				}
				log = append(log, "read")
			case 3:
				msgs, _ := c.XRange(ctx, key, "-", "+").Result()
				if len(msgs) > 0 {
					c.XDel(ctx, key, msgs[r.Intn(len(msgs))].ID)
				}
				log = append(log, "xdel")
			case 4:
				msgs, _ := c.XRange(ctx, key, "-", "+").Result()
				if len(msgs) > 0 {
					c.XDel(ctx, key, msgs[len(msgs)-1].ID)
				}
				log = append(log, "xdeltail")
			case 5:
				k := 0
				if gs, err := c.XInfoGroups(ctx, key).Result(); err == nil && len(gs) > 0 {
					a, _ := c.XRange(ctx, key, "("+gs[0].LastDeliveredID, "+").Result()
					k = len(a)
				}
				c.XTrimMaxLen(ctx, key, int64(k+r.Intn(2)))
				log = append(log, "trim")
			}
			// truth
			groups, err := c.XInfoGroups(ctx, key).Result()
			if err != nil || len(groups) == 0 {
				continue
			}
			g := groups[0]
			after, _ := c.XRange(ctx, key, "("+g.LastDeliveredID, "+").Result()
			bl, err := b.GroupBacklog(ctx, topic, group)
			if err != nil {
				t.Fatal(err)
			}
			if len(after) > 0 && bl.Pending == 0 && bl.Lag <= 0 {
				t.Fatalf("seed %d after %v: %d entries queued after %s, GroupBacklog %+v (server lag %d)", seed, log, len(after), g.LastDeliveredID, bl, g.Lag)
			}
			// And no lag where nothing is left: the server's figure stays
			// above zero after deletions (entries added - entries read).
			if len(after) == 0 && bl.Lag != 0 {
				t.Fatalf("seed %d after %v: no entry left after %s, GroupBacklog %+v (server lag %d): want Lag 0", seed, log, g.LastDeliveredID, bl, g.Lag)
			}
		}
	}
}
