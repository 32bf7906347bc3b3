package redisstreams

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// TestReviewH61ForeignEntriesDeadLettered (review h61, held): entries
// written with plain XADD on a topic that is not UTF-8, which ValidateEvent
// would refuse or which do not decode, never make a dead letter that cannot
// be published (redelivered forever): metadata JSON with bytes that are not
// UTF-8 and a lone surrogate, CreatedAt at both ends of Unix nanoseconds,
// failing their one allowed attempt, and undecodable entries (a created
// field out of int64's range, fields that are not UTF-8), all land in
// <topic>.dead with valid UTF-8 metadata and the entries are acked.
func TestReviewH61ForeignEntriesDeadLettered(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	c := srv.Client(t)
	b := psBackend(t, c, Options{})
	const topic = "p\xff{x}"
	dead := newFaultRecorder()
	var mu sync.Mutex
	deadEvents := map[string]pubsub.Event{}
	faultSubscribe(t, b, pubsub.DeadLetterTopic(topic), func(ctx context.Context, e pubsub.Event) error {
		mu.Lock()
		deadEvents[e.ID] = e
		mu.Unlock()
		return dead.handler(ctx, e)
	}, pubsub.Group("inspect"))
	faultSubscribe(t, b, topic, func(context.Context, pubsub.Event) error {
		return errors.New("fail \xfe")
	}, pubsub.Group("g"), pubsub.MaxDeliveries(1))
	add := func(vals ...string) string {
		id, err := c.XAdd(t.Context(), &redis.XAddArgs{Stream: b.keys.Stream(topic), Values: vals}).Result()
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	add("v", "1", "id", "m1", "type", "t", "meta", "{\"k\xff\":\"v\xfe\",\"s\":\"\\udc00\"}", "created", "-9223372036854775808")
	add("v", "1", "id", "m2", "type", "t", "created", "9223372036854775807")
	u1 := add("v", "1", "id", "m3", "type", "t", "created", "99999999999999999999")
	u2 := add("v", "1\xff", "id\xfe", "m4")
	dead.waitFor(t, 15*time.Second, "m1", "m2", "undecodable:"+u1, "undecodable:"+u2)
	mu.Lock()
	for id, e := range deadEvents {
		for k, v := range e.Metadata {
			if !utf8.ValidString(k) || !utf8.ValidString(v) {
				t.Errorf("dead letter %q: metadata %q=%q not UTF-8", id, k, v)
			}
		}
	}
	mu.Unlock()
	deadline := time.Now().Add(5 * time.Second)
	for {
		p, err := c.XPending(t.Context(), b.keys.Stream(topic), "g").Result()
		if err == nil && p.Count == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("XPENDING = %+v, %v; want every entry acked", p, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
