package redisstreams

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// slowHook delays, once armed, pipelines that carry an XREADGROUP and the
// XGROUP DELCONSUMER command, to make an interleaving that can happen on
// its own under load deterministic.
type slowHook struct {
	armed atomic.Bool
	read  time.Duration
	del   time.Duration
	mu    sync.Mutex
	log   []string
	readTally
}

func (h *slowHook) note(s string) {
	h.mu.Lock()
	h.log = append(h.log, time.Now().Format("15:04:05.000")+" "+s)
	h.mu.Unlock()
}

func (h *slowHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *slowHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.armed.Load() {
			n := strings.ToLower(cmd.Name())
			args := cmd.Args()
			if n == "xgroup" && len(args) > 1 && strings.EqualFold(args[1].(string), "delconsumer") {
				time.Sleep(h.del)
				h.note("XGROUP DELCONSUMER sent")
			} else if n == "xpending" {
				h.note("XPENDING sent")
			}
		}
		return next(ctx, cmd)
	}
}
func (h *slowHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.armed.Load() {
			for _, c := range cmds {
				if _, ok := groupReadOf(c); ok {
					time.Sleep(h.read)
					h.note("pipeline with XREADGROUP sent")
					break
				}
			}
		}
		err := next(ctx, cmds)
		h.count(cmds)
		return err
	}
}

// TestUnsubscribeDuringCoalescedRead: a subscription whose read rides
// another subscription's batch (runReads) and is unsubscribed while that
// batch is on its way: the read was sent, so Unsubscribe waits for it and
// hands its entries back. They must stay pending, never be dropped: the
// stream is not drained, and a successor that claims what is pending
// handles all of them. A hook delays the batch to force the interleaving.
// (A cleanup that checked XPENDING and then deleted the consumer in two
// steps, with a read left behind, let the read run in between: the
// deletion dropped the delivered entries with the consumer, nobody ever
// ran them, and DeleteTopicIfDrained deleted the stream as drained.)
func TestUnsubscribeDuringCoalescedRead(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t, redistest.Options{})
	c := srv.Client(t)
	h := &slowHook{read: 300 * time.Millisecond, del: 800 * time.Millisecond}
	c.AddHook(h)
	b := psBackend(t, c, Options{})
	ctx := context.Background()

	var got atomic.Int64
	hA := func(ctx context.Context, e pubsub.Event) error { got.Add(1); return nil }
	hC := func(ctx context.Context, e pubsub.Event) error { return nil }
	subA, err := b.Subscribe(ctx, "ta", hA, pubsub.Group("g"), pubsub.StartFrom(pubsub.Earliest), pubsub.ReadOnDemand())
	if err != nil {
		t.Fatal(err)
	}
	subC, err := b.Subscribe(ctx, "tc", hC, pubsub.Group("g"), pubsub.StartFrom(pubsub.Earliest), pubsub.ReadOnDemand())
	if err != nil {
		t.Fatal(err)
	}
	defer subC.Unsubscribe(ctx)
	q := &b.bus.readQ.one // a standalone client: one lane
	idle := func() bool { q.mu.Lock(); defer q.mu.Unlock(); return q.active == 0 && len(q.queue) == 0 }
	queued := func(n int) {
		deadline := time.Now().Add(5 * time.Second)
		for {
			q.mu.Lock()
			l := len(q.queue)
			q.mu.Unlock()
			if l == n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("queue length %d, want %d", l, n)
			}
			time.Sleep(time.Millisecond)
		}
	}
	// The subscriptions' first reads are done (answered), and nothing is in
	// flight or queued.
	ca, cc := subA.(*groupSub).consumer, subC.(*groupSub).consumer
	for deadline := time.Now().Add(10 * time.Second); !idle() || h.readsOf(ca) == 0 || h.readsOf(cc) == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("initial reads still in flight after 10s")
		}
	}
	for i := 0; i < 3; i++ {
		if err := b.Publish(ctx, "ta", pubsub.Event{Type: "t"}); err != nil {
			t.Fatal(err)
		}
	}
	// Two batches of reads in flight (stands for two other subscriptions'
	// reads on a busy Backend): the next reads queue.
	q.mu.Lock()
	q.active = readMaxActive
	q.mu.Unlock()
	subC.(pubsub.Kicker).Kick()
	queued(1)
	subA.(pubsub.Kicker).Kick()
	queued(2)
	h.armed.Store(true)
	// One of the in-flight batches is done: its leader hands the queue
	// [C's read, A's read] to C, which sends it (delayed by the hook).
	q.finish(readMaxBatch)
	// A's tenure ends now (signals: its linger ran out): it does not wait
	// for its read.
	if err := subA.Unsubscribe(ctx); err != nil {
		t.Fatal(err)
	}
	key := b.keys.Stream("ta")
	deadline := time.Now().Add(10 * time.Second)
	for {
		sum, err := c.XPending(ctx, key, "g").Result()
		if err != nil {
			t.Fatal(err)
		}
		if sum.Count == 3 {
			break // the late read ran; its entries are pending
		}
		if time.Now().After(deadline) {
			t.Fatalf("the late read's entries are not pending after 10s (pending %d, handled %d)", sum.Count, got.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	h.armed.Store(false)
	if gone, err := b.DeleteTopicIfDrained(ctx, "ta", "g"); err != nil || gone {
		t.Fatalf("DeleteTopicIfDrained = %v, %v; want false: three entries are pending", gone, err)
	}
	// A successor that takes over everything pending (signals' next tenure).
	got2 := make(chan string, 8)
	sub2, err := b.Subscribe(ctx, "ta", func(ctx context.Context, e pubsub.Event) error { got2 <- e.ID; return nil },
		pubsub.Group("g"), pubsub.ClaimPending(), pubsub.ReadOnDemand())
	if err != nil {
		t.Fatal(err)
	}
	defer sub2.Unsubscribe(ctx)
	for i := range 3 {
		select {
		case <-got2:
		case <-time.After(10 * time.Second):
			t.Fatalf("the successor handled %d of the 3 entries within 10s", i)
		}
	}
}
