package redisstreams_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
	"github.com/leasebus/leasebus/redisstreams"
)

// TestReviewH72BigEventBacklogBlocksServer: one Backend made by NewURL
// (go-redis's defaults: ReadTimeout 3s) carries 150 group subscriptions
// of small events and one group subscription that starts on a backlog of
// 270 events of just under 1 MiB each: events Publish accepts with the
// default MaxEventSize, read with the default BatchSize (256). While that
// subscription catches up, the other topics get a publish round every
// 300ms, and a probe PINGs the server every 50ms on a client of its own.
//
// Nothing the docs say lets one subscription's catch-up stop the Redis
// server: every call of every client of the server (other Backends' lease
// renewals too) waits for it, and past go-redis's ReadTimeout fails. So
// every Publish must succeed, every event be delivered once, and the
// server answer every PING within 3s (go-redis's default ReadTimeout).
//
// Found by review h72: the subscription's first read, one read.lua of
// COUNT 256, ran 13.4s on the server (SLOWLOG; XREADGROUP alone of the
// same entries 1.7s: read.lua converts the 256 MiB reply to Lua and back),
// the probe waited 7.9-11.6s for a PING, Publishes of small events to
// unrelated topics on context.Background failed with "i/o timeout" (1-2
// per run), and none of the 270 big events was delivered in 50-57s (each
// read timed out on the client and was retried, blocking the server again).
func TestReviewH72BigEventBacklogBlocksServer(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	b, err := redisstreams.NewURL(ctx, srv.URL(), redisstreams.Options{Prefix: "h72big"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	const light, rounds, huge = 150, 8, 270
	big := []byte(strings.Repeat("x", 1<<20-4096))
	for i := range huge {
		if err := b.Publish(ctx, "huge", pubsub.Event{ID: fmt.Sprint("h", i), Type: "big", Data: big}); err != nil {
			t.Fatal(err)
		}
	}
	var (
		mu        sync.Mutex
		delivered = map[string]int{}
		pubFail   []string
	)
	count := func(_ context.Context, e pubsub.Event) error {
		mu.Lock()
		delivered[e.ID]++
		mu.Unlock()
		return nil
	}
	for i := range light {
		if _, err := b.Subscribe(ctx, fmt.Sprint("l", i), count, pubsub.Group("g")); err != nil {
			t.Fatal(err)
		}
	}
	probe := redis.NewClient(&redis.Options{Addr: srv.Addr(), ReadTimeout: time.Minute})
	t.Cleanup(func() { _ = probe.Close() })
	var worstPing atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			at := time.Now()
			if err := probe.Ping(ctx).Err(); err != nil {
				t.Errorf("probe PING: %v", err)
			}
			if d := time.Since(at); d > time.Duration(worstPing.Load()) {
				worstPing.Store(int64(d))
			}
		}
	})
	start := time.Now()
	if _, err := b.Subscribe(ctx, "huge", count, pubsub.Group("g"), pubsub.StartFrom(pubsub.Earliest)); err != nil {
		t.Fatal(err)
	}
	for r := range rounds {
		for i := range light {
			id := fmt.Sprint(r, "-", i)
			if err := b.Publish(ctx, fmt.Sprint("l", i), pubsub.Event{ID: id, Type: "x"}); err != nil {
				mu.Lock()
				pubFail = append(pubFail, fmt.Sprintf("%s after %v: %v", id, time.Since(start).Round(time.Millisecond), err))
				mu.Unlock()
			}
		}
		time.Sleep(300 * time.Millisecond)
	}
	want := light*rounds + huge - len(pubFail)
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		n := len(delivered)
		mu.Unlock()
		if n >= want || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	var dups []string
	for id, n := range delivered {
		if n > 1 {
			dups = append(dups, id)
		}
	}
	slices.Sort(dups)
	t.Logf("%d of %d events delivered in %v; slowest PING %v; %d publishes failed",
		len(delivered), light*rounds+huge, time.Since(start).Round(time.Millisecond), time.Duration(worstPing.Load()).Round(time.Millisecond), len(pubFail))
	for _, f := range pubFail {
		t.Errorf("Publish to an unrelated topic failed: %s", f)
	}
	if w := time.Duration(worstPing.Load()); w > 3*time.Second {
		t.Errorf("the server did not answer a PING for %v while one group subscription caught up on events of 1 MiB (go-redis's ReadTimeout is 3s)", w.Round(time.Millisecond))
	}
	if len(delivered) < want {
		t.Errorf("%d of %d events delivered within 30s of the last publish", len(delivered), want)
	}
	if len(dups) > 0 {
		t.Errorf("%d events delivered more than once (handlers all returned nil): %.10v", len(dups), dups)
	}
}
