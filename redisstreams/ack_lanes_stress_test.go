package redisstreams

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/redistest"
)

// pendingIDs makes n entries of key pending in group g (consumer c) and
// returns their ids.
func pendingIDs(t *testing.T, c redis.UniversalClient, key string, n int) []string {
	t.Helper()
	ctx := context.Background()
	if err := c.XGroupCreateMkStream(ctx, key, "g", "$").Err(); err != nil {
		t.Fatal(err)
	}
	pipe := c.Pipeline()
	for range n {
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: key, Values: []any{"f", "v"}})
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "c", Streams: []string{key, ">"}, Count: int64(n)}).Result()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range res[0].Messages {
		ids = append(ids, m.ID)
	}
	return ids
}

// TestAckerStress: adders on 6 streams, each flushing its stream
// (flush(ctx, key)) after every few acks and checking that what it added is
// acked; flushers of everything beside them. Every flush(key) must find its
// acks written, and no lane may be left ackLaneIdle (and a margin) after
// the last ack. (Review of helper 40, 2026-11-28.)
func TestAckerStress(t *testing.T) {
	redistest.Require(t)
	for name, c := range clusterAndStandalone(t) {
		t.Run(name, func(t *testing.T) {
			b := newBackendOn(t, c)
			ctx := context.Background()
			const streams, per = 6, 600
			keys := make([]string, streams)
			ids := make([][]string, streams)
			for i := range keys {
				keys[i] = b.keys.Stream(fmt.Sprint("stress-", i))
				ids[i] = pendingIDs(t, c, keys[i], per)
			}
			a := &b.bus.acks
			stop := make(chan struct{})
			var fl sync.WaitGroup
			for range 2 {
				fl.Go(func() {
					for {
						select {
						case <-stop:
							return
						default:
						}
						if err := a.flush(ctx, ""); err != nil {
							t.Error(err)
						}
					}
				})
			}
			var wg sync.WaitGroup
			for i := range streams {
				wg.Go(func() {
					for j := 0; j < per; {
						n := 1 + rand.IntN(7)
						from := j
						for ; j < per && j < from+n; j++ {
							a.add(keys[i], "g", ids[i][j], 0, nil)
						}
						fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
						err := a.flush(fctx, keys[i])
						cancel()
						if err != nil {
							t.Errorf("flush %s: %v", keys[i], err)
							return
						}
						// every id up to j must be acked
						p, err := c.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: keys[i], Group: "g", Start: "-", End: ids[i][j-1], Count: 10}).Result()
						if err != nil {
							t.Error(err)
							return
						}
						if len(p) > 0 {
							t.Errorf("%s: flush(key) returned with %d acks queued before it not written (first %s, added up to %s)", keys[i], len(p), p[0].ID, ids[i][j-1])
							return
						}
					}
				})
			}
			wg.Wait()
			close(stop)
			fl.Wait()
			lanes := func() int {
				a.mu.Lock()
				defer a.mu.Unlock()
				return len(a.lanes)
			}
			for last := time.Now(); lanes() != 0; time.Sleep(10 * time.Millisecond) {
				if time.Since(last) > ackLaneIdle+4*time.Second {
					t.Fatalf("%d lanes left %v after the last ack", lanes(), time.Since(last))
				}
			}
		})
	}
}

// TestAckerCloseRace: adds racing close (the WaitGroup's Add against its
// Wait): no panic, no race, no lane or goroutine left after close, idle
// lanes included. (Review of helper 40.)
func TestAckerCloseRace(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t, redistest.Options{})
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	for round := range 50 {
		b := newBackendOn(t, c)
		key := b.keys.Stream(fmt.Sprint("cr-", round))
		ids := pendingIDs(t, c, key, 200)
		a := &b.bus.acks
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Go(func() {
				for j := w; j < len(ids); j += 4 {
					a.add(key, "g", ids[j], 0, nil)
					if j%16 == 0 {
						_ = a.flush(context.Background(), key)
					}
				}
			})
		}
		time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond)
		_ = a.close()
		wg.Wait()
		a.mu.Lock()
		n := len(a.lanes)
		a.mu.Unlock()
		if n != 0 {
			t.Fatalf("round %d: %d lanes left after close", round, n)
		}
	}
}
