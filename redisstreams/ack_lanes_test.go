package redisstreams

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// TestClusterStalledMasterSparesOtherAcks: on a Redis Cluster (a default
// ClusterClient) one master stops answering (SIGSTOP) just as a group
// handler of a topic on it returns, so that its ack is to be written there.
// A group subscription of a topic on a healthy master then handles an event
// and is unsubscribed. Its ack must be written, and its Unsubscribe must
// return (having handed back, flushed and deleted its consumer), well
// before the cluster declares the paused master failed (its node timeout,
// 5s, after which every master answers CLUSTERDOWN).
//
// Found with TestClusterStalledMasterSparesHealthyThreads (signals), which
// failed in 2 of 5 loaded runs: the acker wrote every ack of the Backend in
// one pipeline, whatever its master, so one XACK for the paused master held
// all the others, and every group Unsubscribe (which waited for all acks
// queued before it) with them; a signals tenure that ended then held the
// Sends to its thread, on a healthy master, until CLUSTERDOWN. Before acks
// were written per master: "ack on the healthy master not written after
// 2s", every run. Now: a few milliseconds.
func TestClusterStalledMasterSparesOtherAcks(t *testing.T) {
	redistest.Require(t)
	cl := redistest.StartCluster(t, 3)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	t.Cleanup(func() { _ = c.Close() })
	b := newBackendOn(t, c)
	ctx := context.Background()
	paused := cl.Nodes()[0]
	_, healthy, sick := clusterOp(t, b, c, "publish", "al-", paused.Addr(), 1, 1)
	good, bad := healthy[0], sick[0]

	release := make(chan struct{})
	started := make(chan struct{}, 1)
	if _, err := b.Subscribe(ctx, bad, func(context.Context, pubsub.Event) error {
		started <- struct{}{}
		<-release
		return nil
	}, pubsub.Group("g")); err != nil {
		t.Fatal(err)
	}
	handled := make(chan time.Time, 1)
	gsub, err := b.Subscribe(ctx, good, func(context.Context, pubsub.Event) error {
		handled <- time.Now()
		return nil
	}, pubsub.Group("g"))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Publish(ctx, bad, pubsub.Event{Type: "x"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the handler of the paused master's topic did not start within 10s")
	}
	paused.Pause(t)
	t.Cleanup(func() { paused.Resume(t) }) // before b.Close (cleanups run last first)
	pausedAt := time.Now()
	close(release) // its ack goes to the paused master

	if err := b.Publish(ctx, good, pubsub.Event{Type: "x"}); err != nil {
		t.Fatalf("publish on the healthy master: %v", err)
	}
	var at time.Time
	select {
	case at = <-handled:
	case <-time.After(2 * time.Second):
		// Seen once in about 100 runs, unexplained: the stacks tell
		// what the delivery waited for.
		buf := make([]byte, 4<<20)
		buf = buf[:runtime.Stack(buf, true)]
		t.Logf("goroutines:\n%s", buf)
		t.Fatal("event on the healthy master not handled within 2s")
	}
	// XPENDING through the node's own client: the Cluster client is
	// not needed, and its map of slots is not in question here.
	node, err := c.MasterForKey(ctx, b.keys.Stream(good))
	if err != nil {
		t.Fatal(err)
	}
	const bound = 2 * time.Second
	for {
		n, err := node.XPending(ctx, b.keys.Stream(good), "g").Result()
		if err != nil {
			t.Fatal(err)
		}
		if n.Count == 0 {
			break
		}
		if time.Since(at) > bound {
			t.Fatalf("ack on the healthy master not written %v after its handler returned (%v into the pause): %d pending", bound, time.Since(pausedAt), n.Count)
		}
		time.Sleep(5 * time.Millisecond)
	}
	acked := time.Since(at)
	uctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	began := time.Now()
	if err := gsub.Unsubscribe(uctx); err != nil {
		t.Fatalf("Unsubscribe of the healthy master's group (%v into the pause): %v", time.Since(pausedAt), err)
	}
	consumers, err := node.XInfoConsumers(ctx, b.keys.Stream(good), "g").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(consumers) != 0 {
		t.Errorf("Unsubscribe left %d consumers of the healthy master's group", len(consumers))
	}
	t.Logf("on the healthy master: ack written %v after the handler returned; Unsubscribe took %v (%v into the pause)",
		acked, time.Since(began), time.Since(pausedAt))
}

// TestAckerLanesGo: the acker keeps a lane (a map entry and a goroutine)
// only while it has acks to write and ackLaneIdle after. 200 events acked
// on two streams of a 3-master Cluster and on a standalone server leave no
// lane within ackLaneIdle (and a margin) of Flush's return, and the entries
// are all acked.
func TestAckerLanesGo(t *testing.T) {
	redistest.Require(t)
	for name, c := range clusterAndStandalone(t) {
		t.Run(name, func(t *testing.T) {
			b := newBackendOn(t, c)
			ctx := context.Background()
			topics := []string{"lanes-a", "lanes-b"}
			for _, tp := range topics {
				if _, err := b.Subscribe(ctx, tp, func(context.Context, pubsub.Event) error { return nil }, pubsub.Group("g"), pubsub.Concurrency(8)); err != nil {
					t.Fatal(err)
				}
			}
			for i := range 200 {
				if err := b.Publish(ctx, topics[i%2], pubsub.Event{Type: "x"}); err != nil {
					t.Fatal(err)
				}
			}
			fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			if err := b.Flush(fctx); err != nil {
				t.Fatal(err)
			}
			// A lane waits ackLaneIdle for more acks, then goes.
			lanes := func() int {
				b.bus.acks.mu.Lock()
				defer b.bus.acks.mu.Unlock()
				return len(b.bus.acks.lanes)
			}
			flushed := time.Now()
			for lanes() != 0 {
				if time.Since(flushed) > ackLaneIdle+4*time.Second {
					t.Fatalf("%d ack lanes left %v after Flush, want 0 after ackLaneIdle (%v)", lanes(), time.Since(flushed), ackLaneIdle)
				}
				time.Sleep(10 * time.Millisecond)
			}
			t.Logf("the lanes went %v after Flush", time.Since(flushed).Round(time.Millisecond))
			for _, tp := range topics {
				n, err := c.XPending(ctx, b.keys.Stream(tp), "g").Result()
				if err != nil {
					t.Fatal(err)
				}
				if n.Count != 0 {
					t.Errorf("%s: %d entries pending after Flush", tp, n.Count)
				}
			}
		})
	}
}

// BenchmarkAck: the acker's cost per ack (XACK of an id no group holds, so
// that the server's work stays the same): Lone adds one ack and waits for
// it (flush), as a sparse stream's acks go; Concurrent adds from 8
// goroutines per CPU and waits once at the end. On a standalone server.
func BenchmarkAck(b *testing.B) {
	redistest.Require(b)
	srv := redistest.Start(b, redistest.Options{})
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	b.Cleanup(func() { _ = c.Close() })
	be := newBackendOn(b, c)
	ctx := context.Background()
	keys := make([]string, 8)
	for i := range keys {
		keys[i] = be.keys.Stream(fmt.Sprint("ackbench-", i))
		if err := c.XGroupCreateMkStream(ctx, keys[i], "g", "$").Err(); err != nil {
			b.Fatal(err)
		}
	}
	a := &be.bus.acks
	b.Run("Lone", func(b *testing.B) {
		b.ReportAllocs()
		for i := range b.N {
			a.add(keys[i%len(keys)], "g", "0-1", 0, nil)
			if err := a.flush(ctx, ""); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Concurrent", func(b *testing.B) {
		b.ReportAllocs()
		var n atomic.Int64
		b.SetParallelism(8)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				a.add(keys[n.Add(1)%int64(len(keys))], "g", "0-1", 0, nil)
			}
		})
		if err := a.flush(ctx, ""); err != nil {
			b.Fatal(err)
		}
	})
}

// clusterAndStandalone starts a 3-master Cluster and a standalone server
// and returns a default client of each, by name, closed when t ends (also
// when -run picks one of t's subtests).
func clusterAndStandalone(t *testing.T) map[string]redis.UniversalClient {
	t.Helper()
	cl := redistest.StartCluster(t, 3)
	srv := redistest.Start(t, redistest.Options{})
	cs := map[string]redis.UniversalClient{
		"Cluster":    redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()}),
		"Standalone": redis.NewClient(&redis.Options{Addr: srv.Addr()}),
	}
	for _, c := range cs {
		t.Cleanup(func() { _ = c.Close() })
	}
	return cs
}
