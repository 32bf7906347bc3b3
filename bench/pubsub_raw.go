package main

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// rawPubSub is the hand-written go-redis baseline: XADD per publish; fan-out
// readers XREAD from the last seen id, group readers XREADGROUP and XACK each
// batch in one call. Reads take up to rawReadCount entries.
type rawPubSub struct{ c *redis.Client }

const (
	rawReadCount = 256
	rawBlock     = 100 * time.Millisecond
)

func newRawPubSub(c *redis.Client) (pubsubBackend, error) { return &rawPubSub{c: c}, nil }

func (r *rawPubSub) Publish(ctx context.Context, topic string, payload []byte) error {
	return r.c.XAdd(ctx, &redis.XAddArgs{
		Stream: topic,
		MaxLen: streamMaxLen,
		Approx: true,
		Values: []any{"d", payload},
	}).Err()
}

func (r *rawPubSub) Subscribe(ctx context.Context, topic, group string, h func([]byte)) (func() error, error) {
	var stop atomic.Bool
	var wg sync.WaitGroup
	if group == "" {
		// Start after the current last entry, resolved now so that every
		// event published after Subscribe returns is seen.
		last := "0-0"
		msgs, err := r.c.XRevRangeN(ctx, topic, "+", "-", 1).Result()
		if err != nil {
			return nil, err
		}
		if len(msgs) == 1 {
			last = msgs[0].ID
		}
		wg.Go(func() {
			for !stop.Load() {
				res, err := r.c.XRead(context.Background(), &redis.XReadArgs{
					Streams: []string{topic, last}, Count: rawReadCount, Block: rawBlock,
				}).Result()
				if err != nil {
					if !errors.Is(err, redis.Nil) {
						time.Sleep(10 * time.Millisecond)
					}
					continue
				}
				for _, m := range res[0].Messages {
					h(field(m))
					last = m.ID
				}
			}
		})
	} else {
		err := r.c.XGroupCreateMkStream(ctx, topic, group, "$").Err()
		if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
			return nil, err
		}
		consumer := "c-" + randomID()
		wg.Go(func() {
			ids := make([]string, 0, rawReadCount)
			for !stop.Load() {
				res, err := r.c.XReadGroup(context.Background(), &redis.XReadGroupArgs{
					Group: group, Consumer: consumer, Streams: []string{topic, ">"},
					Count: rawReadCount, Block: rawBlock,
				}).Result()
				if err != nil {
					if !errors.Is(err, redis.Nil) {
						time.Sleep(10 * time.Millisecond)
					}
					continue
				}
				ids = ids[:0]
				for _, m := range res[0].Messages {
					h(field(m))
					ids = append(ids, m.ID)
				}
				if len(ids) > 0 {
					_ = r.c.XAck(context.Background(), topic, group, ids...).Err()
				}
			}
		})
	}
	return func() error { stop.Store(true); wg.Wait(); return nil }, nil
}

func field(m redis.XMessage) []byte {
	s, _ := m.Values["d"].(string)
	return []byte(s)
}

func (r *rawPubSub) Close() error { return nil }
