package redisstreams_test

import (
	"context"
	"fmt"
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

// passCounter is a go-redis hook that counts the calls of group
// subscriptions' periodic passes (XINFO, XPENDING, XCLAIM) in flight at
// once, and the most so far. It also notes the streams whose
// subscription's first read ran its ClaimPending claim to the end: an
// XPENDING over the whole pending list of the group (no IDLE, no
// consumer) answered without error (claimBatch's; the passes' XPENDINGs
// have IDLE or a consumer).
type passCounter struct {
	now, most atomic.Int64

	mu      sync.Mutex
	claimed map[string]bool // stream key → its first read's claim answered
}

// firstClaims returns how many streams' first-read claims were answered.
func (h *passCounter) firstClaims() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.claimed)
}

func (h *passCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *passCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		switch strings.ToLower(cmd.Name()) {
		case "xinfo", "xpending", "xclaim":
			n := h.now.Add(1)
			for m := h.most.Load(); n > m && !h.most.CompareAndSwap(m, n); m = h.most.Load() {
			}
			defer h.now.Add(-1)
		}
		err := next(ctx, cmd)
		if args := cmd.Args(); err == nil && strings.EqualFold(cmd.Name(), "xpending") && len(args) == 6 && args[3] == "-" {
			key, _ := args[1].(string)
			h.mu.Lock()
			if h.claimed == nil {
				h.claimed = make(map[string]bool)
			}
			h.claimed[key] = true
			h.mu.Unlock()
		}
		return err
	}
}

func (h *passCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestOnDemandPassesBounded: 1,000 on-demand group subscriptions (as the
// signals runtime holds one per active thread), kicked over and over, each
// with the least ack deadline (1ms: a periodic pass every 10ms, the least
// pass interval), on a NewURL client (go-redis's default pool of 10 per
// GOMAXPROCS). Their passes run at most
// 4 at once, whatever their number, so that the calls of everything else
// on the client, lease renewals first, still get a connection: a lease
// call made every 20ms meanwhile answers within 1s, always. Before the
// bound every subscription ran its pass at each tick: here 1,000 calls of
// the passes in flight at once (waiting for the pool of 20), 11-13 lease
// calls in the 3s, the slowest 261-485ms; and the signals runtime's
// BenchmarkActiveThreads10000 lost 3,632-6,000 of 10,000 leases ("renew
// 1000 leases: no answer before the call's ctx ended"). Now: at most 4,
// about 100 lease calls, the slowest 22-38ms.
func TestOnDemandPassesBounded(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	b, err := redisstreams.NewURL(ctx, srv.URL(), redisstreams.Options{Prefix: "passes"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	hook := &passCounter{}
	b.Client().AddHook(hook)
	n := 1000
	if testing.Short() {
		n = 300
	}
	subs := make([]pubsub.Kicker, 0, n)
	for i := range n {
		topic := fmt.Sprint("passes.t", i)
		if err := b.Publish(ctx, topic, pubsub.Event{ID: "e", Type: "x"}); err != nil {
			t.Fatal(err)
		}
		sub, err := b.Subscribe(ctx, topic, func(ctx context.Context, ev pubsub.Event) error {
			<-ctx.Done() // held: the entry stays pending, as a running agent's signal does
			return ctx.Err()
		}, pubsub.Group("g"), pubsub.ReadOnDemand(), pubsub.ClaimPending(), pubsub.AckDeadline(pubsub.MinAckDeadline))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe(context.Background()) })
		subs = append(subs, sub.(pubsub.Kicker))
	}
	// Each subscription's first read claims what is pending (ClaimPending)
	// in its own goroutine, once, outside the pass slots: let every one of
	// them finish before counting. No call in flight is not enough: a
	// first read whose goroutine has not sent its XPENDING yet is not in
	// flight either, and on a loaded machine it may send it only once the
	// counting began, beside four passes (CI, -race: "5 calls ... in
	// flight at once"; here, with two CPU hogs, 1-4 of the 1,000 first
	// reads had not sent it when no call was in flight).
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		if hook.firstClaims() == n && hook.now.Load() == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("1m after the subscriptions started: %d of %d first reads' claims answered, %d calls in flight", hook.firstClaims(), n, hook.now.Load())
		}
	}
	time.Sleep(200 * time.Millisecond)
	hook.most.Store(hook.now.Load())
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			for _, s := range subs {
				s.Kick()
			}
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	})
	var slowest time.Duration
	calls := 0
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		start := time.Now()
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := b.AcquireLease(cctx, "passes.lease", "me", time.Minute)
		cancel()
		if err != nil {
			t.Fatalf("lease call: %v", err)
		}
		slowest = max(slowest, time.Since(start))
		calls++
	}
	close(stop)
	wg.Wait()
	t.Logf("%d on-demand subscriptions kicked every 5ms for 3s: at most %d calls of their passes in flight at once; %d lease calls, the slowest %v",
		n, hook.most.Load(), calls, slowest.Round(time.Millisecond))
	if m := hook.most.Load(); m > 4 {
		t.Errorf("%d calls of the subscriptions' periodic passes in flight at once, want at most 4", m)
	}
	if slowest > time.Second {
		t.Errorf("a lease call took %v while the subscriptions ran their passes, want at most 1s", slowest.Round(time.Millisecond))
	}
}
