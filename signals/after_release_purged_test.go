package signals_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasebus/leasebus/pubsub"
	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

// TestKeptInboxPurgedQueueNoTenures: the two idle-thread cases
// fixed separately (an inbox kept by another consumer group,
// TestAfterReleaseNoTenuresForKeptInbox; an operator deleting queued
// signals, TestDeletedQueuedTailIdleNoTenures) together. The inbox is
// kept (another group), and the operator purges it (XTRIM MAXLEN 0) while
// s1 runs and s2 is queued. Nothing is left to run, but XINFO GROUPS
// reports a lag of 1 for signals.owner (entries-added 2, entries-read 1 on
// an empty stream), GroupBacklog passes it on, and afterRelease starts a
// Recovered tenure after every release, forever (review 14 of 2026-11-23:
// 5 tenures in 3s). GroupBacklog now checks a positive lag against the
// entries left after the group's last delivered id.
func TestKeptInboxPurgedQueueNoTenures(t *testing.T) {
	srv, cl := startRedis(t)
	ctx := context.Background()
	b, err := redisstreams.NewURL(ctx, srv.URL(), redisstreams.Options{Prefix: "kp"})
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
	const th = "kq"
	key := "kp:{" + signals.InboxTopic(th) + "}"
	other, err := b.Subscribe(ctx, signals.InboxTopic(th), func(context.Context, pubsub.Event) error { return nil },
		pubsub.Group("some-tool"), pubsub.StartFrom(pubsub.Earliest))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Unsubscribe(ctx)
	if _, err := rt.Send(ctx, th, sig("s1")); err != nil {
		t.Fatal(err)
	}
	for c.ran.Load() < 1 {
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := rt.Send(ctx, th, sig("s2")); err != nil {
		t.Fatal(err)
	}
	// The operator drops what is queued (and the history) of the thread.
	if err := cl.XTrimMaxLen(ctx, key, 0).Err(); err != nil {
		t.Fatal(err)
	}
	close(gate)
	time.Sleep(time.Second)
	before := c.get(th)
	time.Sleep(3 * time.Second)
	n := c.get(th) - before
	if bl, err := b.GroupBacklog(ctx, signals.InboxTopic(th), signals.InboxGroup); err == nil {
		n, _ := cl.XLen(ctx, key).Result()
		t.Logf("backlog %+v, XLEN %d", bl, n)
	}
	t.Logf("tenures of idle thread in 3s: %d (total %d), ran %d", n, c.get(th), c.ran.Load())
	if n > 1 {
		t.Errorf("idle thread started %d tenures in 3s with nothing to run", n)
	}
}
