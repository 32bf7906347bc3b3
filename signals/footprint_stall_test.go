package signals_test

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

// TestFootprintAfterRedisStall: threads ran to completion and their
// tenures linger; redis-server stalls (SIGSTOP) longer than the lease TTL,
// so every lingering tenure loses its lease (fail-closed, as it must). Once
// the thread is idle past the idle window it must leave nothing behind
// (signals/doc.go, "What a thread leaves behind": "After the longest of
// those an idle thread leaves nothing"). Found by review 6 of 2026-11-22:
// a tenure that lost its lease never deleted its drained inbox, and nothing
// else ever did (21 keys left, 20 of them drained inboxes, in every run);
// now the runtime tries again once the server answers (tidyLater).
func TestFootprintAfterRedisStall(t *testing.T) {
	srv, c := startRedis(t)
	ctx := context.Background()
	b, err := redisstreams.NewURL(ctx, srv.URL(), redisstreams.Options{Prefix: "fp", FenceIdle: time.Second, LeaseStatusWindow: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	var ran atomic.Int64
	agent := func(ctx context.Context, run *signals.Run) error {
		ran.Add(int64(len(run.Signals)))
		for {
			if _, ok := run.Next(ctx); !ok {
				return nil
			}
			ran.Add(1)
		}
	}
	const linger = 10 * time.Second // the tenures linger through the stall
	rt := newRuntime(t, b, agent, signals.WithDedupeWindow(time.Second), signals.WithLinger(linger))
	const n = 20
	for i := range n {
		if _, err := rt.Send(ctx, fmt.Sprint("t", i), signals.Signal{Type: "msg"}); err != nil {
			t.Fatal(err)
		}
	}
	for ran.Load() < n {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	srv.Pause(t)
	time.Sleep(4 * time.Second) // > the 2s TTL
	srv.Resume(t)
	idle := time.Now()
	var keys []string
	for {
		keys, err = c.Keys(ctx, "fp:*").Result()
		if err != nil {
			t.Fatal(err)
		}
		if onlyFootprint(keys, 1) {
			break
		}
		if time.Since(idle) > linger+30*time.Second {
			slices.Sort(keys)
			for _, k := range keys {
				if !slices.Contains(footprintKeys, k) {
					xl, _ := c.XLen(ctx, k).Result()
					gs, _ := c.XInfoGroups(ctx, k).Result()
					ttl, _ := c.PTTL(ctx, k).Result()
					t.Logf("left: %s: %d entries, groups %+v, pttl %v", k, xl, gs, ttl)
					break
				}
			}
			t.Fatalf("%d keys under the prefix %v after the stall, long after every thread went idle, want only %q; e.g. %q",
				len(keys), time.Since(idle).Round(time.Second), footprintKeys, keys[:min(10, len(keys))])
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("%d keys left %v after the stall: %q", len(keys), time.Since(idle).Round(time.Millisecond), keys)
}
