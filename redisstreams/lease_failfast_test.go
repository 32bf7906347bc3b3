package redisstreams

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
)

// TestQueuedLeaseCallsFailWithTheBatchBefore is
// TestQueuedPublishesFailWithTheBatchBefore for lease calls: 160
// AcquireLease calls on context.Background, on a server that stopped
// answering (SIGSTOP), queue behind the batches in flight; when a batch
// fails on a transport error, the calls queued behind it (never sent) fail
// with it, so every call returns within about two batches' timeouts. A
// NewURL client with go-redis's defaults.
func TestQueuedLeaseCallsFailWithTheBatchBefore(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	b, err := NewURL(ctx, srv.URL(), Options{Prefix: psPrefix()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	if _, err := b.AcquireLease(ctx, "warm", "o", time.Minute); err != nil {
		t.Fatal(err)
	}
	srv.Pause(t)
	t.Cleanup(func() { srv.Resume(t) })
	start := time.Now()
	if _, err := b.AcquireLease(ctx, "one", "o", time.Minute); err == nil {
		t.Fatal("acquire on a stopped server succeeded")
	}
	one := time.Since(start)
	t.Logf("one acquire on the stopped server failed after %v", one.Round(time.Millisecond))

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
			_, err := b.AcquireLease(ctx, fmt.Sprint("k", i), "o", time.Minute)
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
	t.Logf("%d acquires on the stopped server: %d failed, the last returned after %v", callers, fails, worst.Round(time.Millisecond))
	if fails != callers {
		t.Errorf("%d of %d acquires failed on a stopped server; want all", fails, callers)
	}
	if bound := 2*one + time.Second; worst > bound {
		t.Errorf("the last of %d acquires returned %v after the stall began; want within two batches' timeouts (%v)", callers, worst.Round(time.Millisecond), bound.Round(time.Millisecond))
	}
}
