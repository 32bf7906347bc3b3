package redisstreams

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// TestQueuedPublishesFailWithTheBatchBefore: publishes on a ctx that cannot
// end (context.Background, as a fire-and-forget caller gives) queue behind
// the batch in flight; when Redis stops answering (SIGSTOP) that batch fails
// after the client's timeouts. What queued behind it was never sent, and
// would each wait for the same timeouts in turn, one batch at a time: with
// 160 publishers the last returned after 45s. The publishes queued when a
// batch fails on a transport error now fail at once with it (not sent:
// retry them), so every Publish returns within two batches' timeouts of the
// stall (5.0s). A NewURL client with go-redis's defaults.
func TestQueuedPublishesFailWithTheBatchBefore(t *testing.T) {
	t.Parallel()
	queuedCallsFailWithTheBatchBefore(t, "publish", func(ctx context.Context, b *Backend, i int) error {
		return b.Publish(ctx, fmt.Sprint("ff", i%4), pubsub.Event{Type: "x"})
	})
}

// TestQueuedLeaseCallsFailWithTheBatchBefore is
// TestQueuedPublishesFailWithTheBatchBefore for lease calls (AcquireLease
// on distinct keys): 45s before, 5.0s now.
func TestQueuedLeaseCallsFailWithTheBatchBefore(t *testing.T) {
	t.Parallel()
	queuedCallsFailWithTheBatchBefore(t, "acquire", func(ctx context.Context, b *Backend, i int) error {
		_, err := b.AcquireLease(ctx, fmt.Sprint("k", i), "o", time.Minute)
		return err
	})
}

// queuedCallsFailWithTheBatchBefore times one call (i = -1) on a stopped
// server (the client's timeouts: one batch's failure), then 160 concurrent
// calls on context.Background: all must fail, the last within two batches'
// timeouts (plus 1s).
func queuedCallsFailWithTheBatchBefore(t *testing.T, what string, call func(ctx context.Context, b *Backend, i int) error) {
	redistest.Require(t)
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	b := urlBackend(t, srv.URL(), Options{})
	if err := call(ctx, b, -1); err != nil { // connections and scripts warm
		t.Fatal(err)
	}
	srv.Pause(t)
	t.Cleanup(func() { srv.Resume(t) })
	start := time.Now()
	if err := call(ctx, b, -2); err == nil {
		t.Fatalf("%s on a stopped server succeeded", what)
	}
	one := time.Since(start)
	t.Logf("one %s on the stopped server failed after %v", what, one.Round(time.Millisecond))

	const callers = 160
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		worst time.Duration
		fails int
	)
	start = time.Now()
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := call(ctx, b, i)
			d := time.Since(start)
			mu.Lock()
			defer mu.Unlock()
			worst = max(worst, d)
			if err != nil {
				fails++
			}
		}()
	}
	wg.Wait()
	t.Logf("%d calls (%s) on the stopped server: %d failed, the last returned after %v", callers, what, fails, worst.Round(time.Millisecond))
	if fails != callers {
		t.Errorf("%d of %d calls (%s) failed on a stopped server; want all", fails, callers, what)
	}
	if bound := 2*one + time.Second; worst > bound {
		t.Errorf("the last of %d calls (%s) returned %v after the stall began; want within two batches' timeouts (%v)", callers, what, worst.Round(time.Millisecond), bound.Round(time.Millisecond))
	}
}

// TestQueuedPublishesSurviveAnErrorReply: only a transport error fails the
// publishes queued behind a batch. A batch whose XADD the server refuses
// (WRONGTYPE: another program's string at the stream's key) fails that
// publish alone; every publish to a good topic, queued behind it or in the
// same batch, is stored.
func TestQueuedPublishesSurviveAnErrorReply(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	b := urlBackend(t, srv.URL(), Options{})
	if err := b.Client().Set(ctx, b.keys.Stream("bad"), "not a stream", 0).Err(); err != nil {
		t.Fatal(err)
	}
	const publishers, rounds = 64, 20
	var (
		wg            sync.WaitGroup
		mu            sync.Mutex
		badOK, goodKO int
		firstGoodErr  error
	)
	for i := range publishers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				topic := fmt.Sprint("good", i%4)
				if i%8 == 0 {
					topic = "bad"
				}
				err := b.Publish(ctx, topic, pubsub.Event{Type: "x"})
				mu.Lock()
				switch {
				case topic == "bad" && err == nil:
					badOK++
				case topic != "bad" && err != nil:
					goodKO++
					if firstGoodErr == nil {
						firstGoodErr = err
					}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if badOK > 0 {
		t.Errorf("%d publishes to a key holding a string succeeded", badOK)
	}
	if goodKO > 0 {
		t.Errorf("%d publishes to good topics failed beside a WRONGTYPE one; first: %v", goodKO, firstGoodErr)
	}
}
