package redisstreams

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// stealSetup: member A (Concurrency 1) is running X1 with X2, X3 read
// ahead and queued; member P (ClaimPending, which takes over "every entry
// pending on the group's other consumers, live or dead") claims X1..X3 and
// is running them, blocked on releaseP. Then A is unsubscribed: its cleanup
// hands X2, X3 "back" with XCLAIM at min-idle 0, IDLE 1 year, RETRYCOUNT 0,
// although they are P's now.
func stealSetup(t *testing.T) (b *Backend, srv *redistest.Server, releaseP chan struct{}, consumerA string, runs func() []string, rec func(who string, e pubsub.Event)) {
	redistest.Require(t)
	srv = redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	var err error
	b, err = NewURL(ctx, srv.URL(), Options{Prefix: psPrefix()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	var mu sync.Mutex
	var log []string
	rec = func(who string, e pubsub.Event) {
		mu.Lock()
		log = append(log, fmt.Sprintf("%s:%s#%d", who, e.Type, e.DeliveryAttempt))
		mu.Unlock()
	}
	runs = func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), log...) }
	for i := 1; i <= 3; i++ {
		if err := b.Publish(ctx, "t", pubsub.Event{Type: fmt.Sprintf("X%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	startedA := make(chan struct{}, 3)
	subA, err := b.Subscribe(ctx, "t", func(ctx context.Context, e pubsub.Event) error {
		rec("A", e)
		startedA <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	}, pubsub.Group("g"), pubsub.StartFrom(pubsub.Earliest), pubsub.AckDeadline(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	consumerA = subA.(*groupSub).consumer
	<-startedA
	releaseP = make(chan struct{})
	startedP := make(chan struct{}, 3)
	subP, err := b.Subscribe(ctx, "t", func(ctx context.Context, e pubsub.Event) error {
		rec("P", e)
		startedP <- struct{}{}
		<-releaseP
		return nil
	}, pubsub.Group("g"), pubsub.ClaimPending(), pubsub.ReadOnDemand(), pubsub.Concurrency(3), pubsub.AckDeadline(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { subP.Unsubscribe(context.Background()) })
	for range 3 {
		select {
		case <-startedP:
		case <-time.After(5 * time.Second):
			t.Fatalf("P did not take over X1..X3: %v", runs())
		}
	}
	if err := subA.Unsubscribe(ctx); err != nil {
		t.Fatal(err)
	}
	return
}

// TestHandBackLeavesClaimedEntries: after A's Unsubscribe, a third member
// C (AckDeadline 10s) must not run X2 and X3, which P claimed and has been
// running for only ~5s. Found by review: A's hand-back (XCLAIM at min-idle
// 0) moved them back to A's consumer with count 0 and a year of idle time,
// and C ran them again as first attempts, beside P. A hand-back now claims
// an entry only if it is still ours (min-idle: the time since our read).
func TestHandBackLeavesClaimedEntries(t *testing.T) {
	t.Parallel()
	b, srv, releaseP, _, runs, rec := stealSetup(t)
	ctx := context.Background()
	c := srv.Client(t)
	pend, _ := c.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: b.keys.Stream("t"), Group: "g", Start: "-", End: "+", Count: 10}).Result()
	for _, p := range pend {
		t.Logf("after A's Unsubscribe: %s on %s, count %d, idle %v", p.ID, p.Consumer, p.RetryCount, p.Idle)
	}
	subC, err := b.Subscribe(ctx, "t", func(ctx context.Context, e pubsub.Event) error {
		rec("C", e)
		return nil
	}, pubsub.Group("g"), pubsub.AckDeadline(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer subC.Unsubscribe(ctx)
	// C's first reclaim pass runs after 5s; P has been running X1..X3 for
	// about 5.5s, within every member's AckDeadline (30s, 30s, 10s).
	time.Sleep(5500 * time.Millisecond)
	got := runs()
	close(releaseP)
	t.Logf("runs (member:event#attempt): %v", got)
	for _, r := range got {
		if r[0] == 'C' {
			t.Errorf("C ran %s while P, which had claimed it, was still running it; all runs: %v", r, got)
		}
	}
}

// TestHandBackAfterClaimLeavesNoConsumer: without a third member, once P
// acks X1..X3, A's consumer is gone. (Before the fix its cleanup kept it for
// the entries it took back from P, and no member ever claimed from it.)
func TestHandBackAfterClaimLeavesNoConsumer(t *testing.T) {
	b, srv, releaseP, consumerA, _, _ := stealSetup(t)
	ctx := context.Background()
	close(releaseP)
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	c := srv.Client(t)
	key := b.keys.Stream("t")
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if sum, _ := c.XPending(ctx, key, "g").Result(); sum != nil && sum.Count == 0 {
			break
		}
	}
	time.Sleep(500 * time.Millisecond)
	noConsumer(t, c, key, "g", consumerA)
}
