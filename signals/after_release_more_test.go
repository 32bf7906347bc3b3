package signals_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/inmem"
	"github.com/leasebus/leasebus/pubsub"
	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

type arCounter struct {
	mu     sync.Mutex
	starts map[string]int
	ran    atomic.Int64
}

func (c *arCounter) observe(e signals.Event) {
	if e.Kind == signals.TenureStarted || e.Kind == signals.Recovered {
		c.mu.Lock()
		c.starts[e.Thread]++
		c.mu.Unlock()
	}
}

func (c *arCounter) get(th string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.starts[th]
}

func arAgent(c *arCounter) signals.Agent {
	return func(ctx context.Context, run *signals.Run) error {
		c.ran.Add(int64(len(run.Signals)))
		for {
			if _, ok := run.Next(ctx); !ok {
				return nil
			}
			c.ran.Add(1)
		}
	}
}

// arIdle sends one signal to thread, waits for it to run, then counts the
// tenures started over the next 3s on an idle system.
func arIdle(t *testing.T, rt *signals.Runtime, c *arCounter, thread string, between func()) {
	ctx := context.Background()
	if _, err := rt.Send(ctx, thread, sig("a")); err != nil {
		t.Fatal(err)
	}
	for c.ran.Load() < 1 {
		time.Sleep(5 * time.Millisecond)
	}
	if between != nil {
		between()
	}
	time.Sleep(time.Second) // first tenure ends
	before := c.get(thread)
	time.Sleep(3 * time.Second)
	after := c.get(thread)
	t.Logf("tenures of idle thread %q in 3s: %d (total %d)", thread, after-before, after)
	if after-before > 1 {
		t.Errorf("idle thread %q started %d tenures in 3s with nothing to run", thread, after-before)
	}
}

// TestAfterReleaseInmemIdleNoTenures: on inmem (a BacklogReader, no
// DrainedDeleter), an idle thread starts no tenure after its first one
// ended: a released tenure takes the thread again only when something
// waits in its inbox (review 13 of 2026-11-23; held).
func TestAfterReleaseInmemIdleNoTenures(t *testing.T) {
	t.Parallel() // mostly waits (TTLs, windows, a stalled server): beside another (CI time)
	b := inmem.New()
	t.Cleanup(func() { b.Close() })
	c := &arCounter{starts: map[string]int{}}
	rt := newRuntime(t, b, arAgent(c), signals.WithObserver(c.observe))
	arIdle(t, rt, c, "im", nil)
}

// Cancel(DropQueued) on idle threads (a mark and its notice each), many at
// once: the threads must leave no keys besides the footprint, and start no
// tenures beyond the one reading the mark.
func TestAfterReleaseDropMarksFootprint(t *testing.T) {
	srv, cl := startRedis(t)
	ctx := context.Background()
	b, err := redisstreams.NewURL(ctx, srv.URL(), redisstreams.Options{Prefix: "fp", FenceIdle: time.Second, LeaseStatusWindow: time.Second, BlockTime: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	c := &arCounter{starts: map[string]int{}}
	rt := newRuntime(t, b, arAgent(c), signals.WithObserver(c.observe), signals.WithDedupeWindow(time.Second), signals.WithLinger(time.Millisecond))
	const n = 50
	for i := range n {
		if _, err := rt.Send(ctx, "d"+string(rune('a'+i%26))+string(rune('a'+i/26)), sig("x")); err != nil {
			t.Fatal(err)
		}
	}
	for c.ran.Load() < n {
		time.Sleep(10 * time.Millisecond)
	}
	ctl, err := signals.NewController(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	time.Sleep(500 * time.Millisecond)
	for i := range n {
		if _, err := ctl.Cancel(ctx, "d"+string(rune('a'+i%26))+string(rune('a'+i/26)), "r", signals.DropQueued()); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	var keys []string
	for {
		keys, err = cl.Keys(ctx, "fp:*").Result()
		if err != nil {
			t.Fatal(err)
		}
		if onlyFootprint(keys, 2) {
			break
		}
		if time.Since(start) > 15*time.Second {
			t.Fatalf("%d keys 15s after the drop marks: %q", len(keys), keys[:min(10, len(keys))])
		}
		time.Sleep(100 * time.Millisecond)
	}
	total := 0
	c.mu.Lock()
	for _, v := range c.starts {
		total += v
	}
	c.mu.Unlock()
	t.Logf("keys gone %v after the marks; %d tenures for %d threads", time.Since(start).Round(time.Millisecond), total, n)
}

// TestDeletedQueuedTailIdleNoTenures: an operator deletes a queued
// signal's entry (XDEL, the newest of the inbox) before the tenure reads
// it. Nothing is left to read, yet delete_drained.lua took the inbox for
// not drained (its group's last delivered id below the stream's last
// generated id), so the deleted signal's wake notice never settled: the
// thread was taken again every recovery interval, up to ten tenures (5 in
// 3s, on f80ca3d too; found by review 13 of 2026-11-23). The script now
// asks whether any entry is left after the last delivered id.
func TestDeletedQueuedTailIdleNoTenures(t *testing.T) {
	t.Parallel() // mostly waits (TTLs, windows, a stalled server): beside another (CI time)
	idleAfterQueueEdit(t, "dq", false, func(ctx context.Context, cl *redis.Client, key string) {
		msgs, err := cl.XRange(ctx, key, "-", "+").Result()
		if err != nil || len(msgs) != 2 {
			t.Fatalf("inbox: %v, %v", msgs, err)
		}
		if err := cl.XDel(ctx, key, msgs[1].ID).Err(); err != nil {
			t.Fatal(err)
		}
	})
}

// idleAfterQueueEdit runs s1 on thread while s2 waits behind it, lets edit
// change the inbox (key) by hand, then lets s1 end and requires that the
// idle thread start at most one tenure in the 3s after a second of idling.
// With keep, another consumer group on the inbox keeps it from being
// deleted.
func idleAfterQueueEdit(t *testing.T, thread string, keep bool, edit func(ctx context.Context, cl *redis.Client, key string)) {
	t.Helper()
	srv, cl := startRedis(t)
	ctx := context.Background()
	b, err := redisstreams.NewURL(ctx, srv.URL(), redisstreams.Options{Prefix: "ar"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	c := &arCounter{starts: map[string]int{}}
	gate := make(chan struct{})
	agent := func(ctx context.Context, run *signals.Run) error {
		c.ran.Add(1)
		<-gate
		for {
			if _, ok := run.Next(ctx); !ok {
				return nil
			}
			c.ran.Add(1)
		}
	}
	rt := newRuntime(t, b, agent, signals.WithObserver(c.observe))
	key := "ar:{" + signals.InboxTopic(thread) + "}"
	if keep {
		other, err := b.Subscribe(ctx, signals.InboxTopic(thread), func(context.Context, pubsub.Event) error { return nil },
			pubsub.Group("some-tool"), pubsub.StartFrom(pubsub.Earliest))
		if err != nil {
			t.Fatal(err)
		}
		defer other.Unsubscribe(ctx)
	}
	if _, err := rt.Send(ctx, thread, sig("s1")); err != nil {
		t.Fatal(err)
	}
	for c.ran.Load() < 1 {
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := rt.Send(ctx, thread, sig("s2")); err != nil {
		t.Fatal(err)
	}
	edit(ctx, cl, key)
	close(gate)
	time.Sleep(time.Second)
	before := c.get(thread)
	time.Sleep(3 * time.Second)
	n := c.get(thread) - before
	if bl, err := b.GroupBacklog(ctx, signals.InboxTopic(thread), signals.InboxGroup); err == nil {
		l, _ := cl.XLen(ctx, key).Result()
		t.Logf("backlog %+v, XLEN %d", bl, l)
	}
	t.Logf("tenures of idle thread in 3s: %d (total %d), ran %d", n, c.get(thread), c.ran.Load())
	if n > 1 {
		t.Errorf("idle thread started %d tenures in 3s with nothing to run", n)
	}
}
