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

// xclaimHook counts the round trips that carry an XCLAIM and, while armed,
// holds the first of them before it is sent until release is closed.
type xclaimHook struct {
	n       atomic.Int64
	armed   atomic.Bool
	held    chan struct{}
	release chan struct{}
	once    sync.Once
}

func (h *xclaimHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *xclaimHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.seen([]redis.Cmder{cmd})
		return next(ctx, cmd)
	}
}

func (h *xclaimHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.seen(cmds)
		return next(ctx, cmds)
	}
}

func (h *xclaimHook) seen(cmds []redis.Cmder) {
	for _, c := range cmds {
		if !strings.EqualFold(c.Name(), "xclaim") {
			continue
		}
		h.n.Add(1)
		if h.armed.Load() {
			hold := false
			h.once.Do(func() { hold = true; close(h.held) })
			if hold {
				<-h.release
			}
		}
		return
	}
}

// TestNackBurstRedeliveredInFewRoundTrips: entries nacked together (on a
// Concurrency above 1, where a nacked entry waits out its redelivery delay
// holding no handler) come back claimed in pipelines of up to retryBatch,
// not one XCLAIM round trip each, and every one is delivered again and
// acked. Before, 500 nacks cost 500 round trips per redelivery, one after
// the other: the signals runtime's wake notices of threads busy elsewhere
// (thousands behind long runs) came back slower than their recovery
// interval.
func TestNackBurstRedeliveredInFewRoundTrips(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	b, err := NewURL(ctx, srv.URL(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	hook := &xclaimHook{}
	b.Client().AddHook(hook)
	const n = 500
	var (
		mu       sync.Mutex
		attempts = map[string]int{}
		acked    atomic.Int64
	)
	sub, err := b.Subscribe(ctx, "burst", func(_ context.Context, ev pubsub.Event) error {
		mu.Lock()
		attempts[ev.ID]++
		mu.Unlock()
		if ev.DeliveryAttempt < 2 {
			return context.Canceled // nack
		}
		acked.Add(1)
		return nil
	}, pubsub.Group("g"), pubsub.StartFrom(pubsub.Earliest), pubsub.Concurrency(64),
		pubsub.AckDeadline(10*time.Second), pubsub.RedeliveryDelay(200*time.Millisecond), pubsub.RedeliveryCap(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe(context.Background()) })
	// In one batch, so that they are nacked together however loaded the
	// machine is (published one by one, they spread over the time 500
	// round trips take, and under a full parallel test run came back in
	// 138 claim round trips against 34-38 alone).
	pubs := make([]pubsub.Publication, n)
	for i := range pubs {
		pubs[i] = pubsub.Publication{Topic: "burst", Event: pubsub.Event{Type: "x"}}
	}
	if err := b.PublishBatch(ctx, pubs); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for acked.Load() < n && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := acked.Load(); got != n {
		t.Fatalf("%d of %d nacked entries were delivered again and acked within 30s", got, n)
	}
	trips := hook.n.Load()
	t.Logf("%d nacked entries came back in %d round trips carrying XCLAIM", n, trips)
	if trips > n/10 {
		t.Errorf("%d nacked entries came back in %d XCLAIM round trips, want at most %d (claimed in pipelines)", n, trips, n/10)
	}
	mu.Lock()
	defer mu.Unlock()
	for id, a := range attempts {
		if a != 2 {
			t.Errorf("entry %s delivered %d times, want 2", id, a)
		}
	}
}

// TestUnsubscribeDuringRedeliveryHandsBack: Unsubscribe while a batch of
// nacked entries is being claimed again (the pipeline fails: the
// subscription's ctx ended) hands those entries back like every other
// nacked entry waiting here (claimable at once by another member), rather
// than leaving them pending on the departed consumer until the ack
// deadline.
func TestUnsubscribeDuringRedeliveryHandsBack(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	b, err := NewURL(ctx, srv.URL(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	gate := &xclaimHook{held: make(chan struct{}), release: make(chan struct{})}
	var releaseOnce sync.Once
	t.Cleanup(func() { releaseOnce.Do(func() { close(gate.release) }) })
	b.Client().AddHook(gate)
	const n = 5
	var nacks atomic.Int64
	sub, err := b.Subscribe(ctx, "ub", func(context.Context, pubsub.Event) error {
		nacks.Add(1)
		return context.Canceled
	}, pubsub.Group("g"), pubsub.StartFrom(pubsub.Earliest), pubsub.Concurrency(4),
		pubsub.AckDeadline(time.Minute), pubsub.RedeliveryDelay(300*time.Millisecond), pubsub.RedeliveryCap(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	gate.armed.Store(true)
	for range n {
		if err := b.Publish(ctx, "ub", pubsub.Event{Type: "x"}); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-gate.held:
	case <-time.After(10 * time.Second):
		t.Fatal("no redelivery claimed within 10s")
	}
	unsub := make(chan error, 1)
	go func() { unsub <- sub.Unsubscribe(ctx) }()
	time.Sleep(50 * time.Millisecond) // Unsubscribe has cancelled the subscription
	releaseOnce.Do(func() { close(gate.release) })
	if err := <-unsub; err != nil {
		t.Fatal(err)
	}
	pend, err := b.Client().XPendingExt(ctx, &redis.XPendingExtArgs{Stream: b.keys.Stream("ub"), Group: "g", Start: "-", End: "+", Count: 100}).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(pend) != n {
		t.Fatalf("%d entries pending after Unsubscribe, want %d (nacked, not acked)", len(pend), n)
	}
	for _, p := range pend {
		if p.Idle < time.Hour {
			t.Errorf("entry %s pending on %s idle %v after Unsubscribe: not handed back (claimable only after the ack deadline)", p.ID, p.Consumer, p.Idle)
		}
	}
}
