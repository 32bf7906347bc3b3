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

// readTally counts the answered XREADGROUPs per consumer (a hook's part).
type readTally struct {
	mu sync.Mutex
	n  map[string]int
}

// groupReadOf returns the consumer of c when c is a group read (read.lua's
// EVALSHA: evalsha, sha, 2, stream, guard, group, consumer, ...).
func groupReadOf(c redis.Cmder) (string, bool) {
	a := c.Args()
	if !strings.EqualFold(c.Name(), "evalsha") || len(a) < 7 || a[1] != readScript.Hash() {
		return "", false
	}
	name, ok := a[6].(string)
	return name, ok
}

// count counts the group reads that ran among cmds, a pipeline that was
// answered (not those refused with NOSCRIPT before the script was loaded).
func (r *readTally) count(cmds []redis.Cmder) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range cmds {
		if err := c.Err(); err != nil && err != redis.Nil {
			continue
		}
		if name, ok := groupReadOf(c); ok {
			if r.n == nil {
				r.n = map[string]int{}
			}
			r.n[name]++
		}
	}
}

// readsOf returns how many XREADGROUPs of consumer were answered.
func (r *readTally) readsOf(consumer string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[consumer]
}

// noConsumer fails t when consumer is still a consumer of group on key.
func noConsumer(t *testing.T, c *redis.Client, key, group, consumer string) {
	t.Helper()
	cons, err := c.XInfoConsumers(context.Background(), key, group).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, ci := range cons {
		if ci.Name == consumer {
			t.Errorf("consumer %s of the unsubscribed subscription is still in the group (pending %d); nothing will ever delete it", ci.Name, ci.Pending)
		}
	}
}

// gateHook holds every pipeline carrying an XREADGROUP of consumer until
// release is closed, and counts the answered XREADGROUPs per consumer.
type gateHook struct {
	readTally
	mu       sync.Mutex
	consumer string
	release  chan struct{}
	held     chan struct{}
	once     sync.Once
	rel      sync.Once
}

func (h *gateHook) open() { h.rel.Do(func() { close(h.release) }) }

func (h *gateHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *gateHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *gateHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.mu.Lock()
		target := h.consumer
		h.mu.Unlock()
		if target != "" {
			for _, c := range cmds {
				if name, ok := groupReadOf(c); ok && name == target {
					h.once.Do(func() { close(h.held) })
					<-h.release
					break
				}
			}
		}
		err := next(ctx, cmds)
		h.count(cmds)
		return err
	}
}

// stoppedReadSetup: subA's read rides subC's batch, and subA is
// unsubscribed while the hook holds that batch (3 entries on "ta" not yet
// read), releasing it 300ms later. Unsubscribe waits for the read, which
// was sent; a version that left it behind let it run after cleanup.
func stoppedReadSetup(t *testing.T) (b *Backend, c *redis.Client, h *gateHook, subC pubsub.Subscription, consumerA string) {
	redistest.Require(t)
	srv := redistest.Start(t, redistest.Options{})
	c = srv.Client(t)
	h = &gateHook{release: make(chan struct{}), held: make(chan struct{})}
	c.AddHook(h)
	b = psBackend(t, c, Options{})
	ctx := context.Background()
	nop := func(ctx context.Context, e pubsub.Event) error { return nil }
	subA, err := b.Subscribe(ctx, "ta", nop, pubsub.Group("g"), pubsub.StartFrom(pubsub.Earliest), pubsub.ReadOnDemand())
	if err != nil {
		t.Fatal(err)
	}
	subC, err = b.Subscribe(ctx, "tc", nop, pubsub.Group("g"), pubsub.StartFrom(pubsub.Earliest), pubsub.ReadOnDemand())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { subC.Unsubscribe(context.Background()) })
	consumerA = subA.(*groupSub).consumer
	q := &b.bus.readQ.one // a standalone client: one lane
	waitQ := func(n int) {
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
	consumerC := subC.(*groupSub).consumer
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		q.mu.Lock()
		idle := q.active == 0 && len(q.queue) == 0
		q.mu.Unlock()
		if idle && h.readsOf(consumerA) > 0 && h.readsOf(consumerC) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("initial reads still in flight after 10s")
		}
	}
	for range 3 {
		if err := b.Publish(ctx, "ta", pubsub.Event{Type: "t"}); err != nil {
			t.Fatal(err)
		}
	}
	q.mu.Lock()
	q.active = readMaxActive // two other batches in flight (busy Backend)
	q.mu.Unlock()
	subC.(pubsub.Kicker).Kick()
	waitQ(1)
	subA.(pubsub.Kicker).Kick()
	waitQ(2)
	h.mu.Lock()
	h.consumer = consumerA
	h.mu.Unlock()
	q.finish(readMaxBatch) // hands [C, A] to C, which sends it: held by the hook
	<-h.held
	time.AfterFunc(300*time.Millisecond, h.open)
	if err := subA.Unsubscribe(ctx); err != nil {
		t.Fatal(err)
	}
	// The read ran: its 3 entries are pending (handed back).
	key := b.keys.Stream("ta")
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		sum, _ := c.XPending(ctx, key, "g").Result()
		if sum != nil && sum.Count == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the read did not run")
		}
	}
	return b, c, h, subC, consumerA
}

// TestStoppedConsumerGoesAfterTakeover: after an Unsubscribe whose read
// rode another subscription's batch, and a successor that took over and
// acked everything, the stopped subscription's consumer is gone from the
// group (every consumer the library creates goes away).
func TestStoppedConsumerGoesAfterTakeover(t *testing.T) {
	b, c, _, _, consumerA := stoppedReadSetup(t)
	ctx := context.Background()
	key := b.keys.Stream("ta")
	got := make(chan string, 8)
	sub2, err := b.Subscribe(ctx, "ta", func(ctx context.Context, e pubsub.Event) error { got <- e.ID; return nil },
		pubsub.Group("g"), pubsub.ClaimPending(), pubsub.ReadOnDemand())
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		select {
		case <-got:
		case <-time.After(5 * time.Second):
			t.Fatal("successor did not get the entries")
		}
	}
	if err := sub2.Unsubscribe(ctx); err != nil {
		t.Fatal(err)
	}
	noConsumer(t, c, key, "g", consumerA)
}

// TestSuccessorGetsStoppedReadsEntries: a ClaimPending successor started
// after the predecessor's Unsubscribe returned (the lease hand-over order)
// gets the entries the predecessor's last read took, first and in order,
// before a newer entry. (When the read was left behind and ran after the
// predecessor's cleanup, they sat on the dead consumer until AckDeadline,
// and the newer entry came first.)
func TestSuccessorGetsStoppedReadsEntries(t *testing.T) {
	b, _, h, _, _ := stoppedReadSetup(t)
	ctx := context.Background()
	got := make(chan pubsub.Event, 8)
	sub2, err := b.Subscribe(ctx, "ta", func(ctx context.Context, e pubsub.Event) error { got <- e; return nil },
		pubsub.Group("g"), pubsub.ClaimPending(), pubsub.ReadOnDemand(), pubsub.AckDeadline(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer sub2.Unsubscribe(ctx)
	time.Sleep(100 * time.Millisecond) // sub2 claimed nothing (nothing pending yet); its first read queues
	h.open()
	time.Sleep(100 * time.Millisecond)
	if err := b.Publish(ctx, "ta", pubsub.Event{Type: "newer"}); err != nil {
		t.Fatal(err)
	}
	sub2.(pubsub.Kicker).Kick()
	var types []string
	timeout := time.After(10 * time.Second)
loop:
	for len(types) < 4 {
		select {
		case e := <-got:
			types = append(types, e.Type)
		case <-timeout:
			break loop
		}
	}
	t.Logf("successor handled %v", types)
	if len(types) < 4 || types[0] == "newer" {
		t.Errorf("successor handled %v within 10s; want the 3 older entries first, then the newer one", types)
	}
}

// TestStoppedReadCostsNoAttempt: entries the last read of a stopping
// subscription took, which no handler started, are handed back with their
// delivery count undone: a successor with MaxDeliveries(1) runs them. (A
// read left behind kept its count, and such a successor dead-lettered all
// of them without running a handler.)
func TestStoppedReadCostsNoAttempt(t *testing.T) {
	b, _, _, _, _ := stoppedReadSetup(t)
	ctx := context.Background()
	var dead atomic.Int64
	dsub, err := b.Subscribe(ctx, pubsub.DeadLetterTopic("ta"), func(ctx context.Context, e pubsub.Event) error { dead.Add(1); return nil },
		pubsub.StartFrom(pubsub.Earliest))
	if err != nil {
		t.Fatal(err)
	}
	defer dsub.Unsubscribe(ctx)
	var ran atomic.Int64
	sub2, err := b.Subscribe(ctx, "ta", func(ctx context.Context, e pubsub.Event) error { ran.Add(1); return nil },
		pubsub.Group("g"), pubsub.ClaimPending(), pubsub.ReadOnDemand(), pubsub.MaxDeliveries(1))
	if err != nil {
		t.Fatal(err)
	}
	defer sub2.Unsubscribe(ctx)
	for deadline := time.Now().Add(10 * time.Second); ran.Load()+dead.Load() < 3 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("handler ran %d, dead letters %d", ran.Load(), dead.Load())
	if ran.Load() != 3 {
		t.Errorf("handler ran %d of 3 never-run entries (dead-lettered %d) under MaxDeliveries(1)", ran.Load(), dead.Load())
	}
}
