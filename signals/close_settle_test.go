package signals_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

// TestCloseReleasesLeasesOfGivenUpSends (review revM, helper 18): no
// network tricks. Runtime A sends to 50 fresh threads at once with ctxs of
// 0.3-1ms on a healthy server, then closes at once (Close(Background)
// returns nil). Runtime B then sends a signal to each thread: each must
// run within 1s. An acquire that took the lease after its Send gave up is
// settled by A (settleAcquire); when Close began before the settle's first
// try, the settle used to stop and leave the thread leased to A's dead run
// for a TTL (4, 36, 11 and 18 of 50 threads in 4 runs; 0 before Send's
// acquire ended with its ctx). Now it releases that lease as Close runs.
func TestCloseReleasesLeasesOfGivenUpSends(t *testing.T) {
	srv, _ := startRedis(t)
	ctx := context.Background()
	const ttl = 4 * time.Second
	var (
		mu  sync.Mutex
		ran = map[string]time.Time{}
	)
	agent := func(ctx context.Context, r *signals.Run) error {
		return eachSignal(ctx, r, func(s signals.Signal) {
			mu.Lock()
			ran[s.ID] = time.Now()
			mu.Unlock()
		})
	}
	mk := func(name string) *signals.Runtime {
		b, err := redisstreams.NewURL(ctx, srv.URL(), redisstreams.Options{Prefix: "closesettle"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		rt, err := signals.New(b, agent, signals.WithProcessID(name), signals.WithLeaseTTL(ttl),
			signals.WithRecoveryInterval(200*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			c, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			_ = rt.Close(c)
		})
		return rt
	}
	a, bRt := mk("A"), mk("B")
	if _, err := a.Send(ctx, "warm", signals.Signal{ID: "w", Type: "t"}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	const n = 50
	var mayHaveRun, nils atomic.Int64
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			d := 300*time.Microsecond + time.Duration(i%8)*100*time.Microsecond
			sctx, cancel := context.WithTimeout(ctx, d)
			defer cancel()
			_, err := a.Send(sctx, fmt.Sprint("x", i), signals.Signal{ID: fmt.Sprint("x", i, "-a"), Type: "t"})
			if err == nil {
				nils.Add(1)
			} else if strings.Contains(err.Error(), "may have run") {
				mayHaveRun.Add(1)
			}
		})
	}
	wg.Wait()
	start := time.Now()
	cerr := a.Close(ctx)
	t.Logf("A: %d Sends nil, %d failed with 'may have run'; Close(Background) returned %v after %v", nils.Load(), mayHaveRun.Load(), cerr, time.Since(start).Round(time.Millisecond))
	sent := time.Now()
	for i := range n {
		if _, err := bRt.Send(ctx, fmt.Sprint("x", i), signals.Signal{ID: fmt.Sprint("x", i, "-b"), Type: "t"}); err != nil {
			t.Errorf("B send: %v", err)
		}
	}
	slow := 0
	var worst time.Duration
	for i := range n {
		id := fmt.Sprint("x", i, "-b")
		for {
			mu.Lock()
			at, ok := ran[id]
			mu.Unlock()
			if ok {
				d := at.Sub(sent)
				worst = max(worst, d)
				if d > time.Second {
					slow++
				}
				break
			}
			if time.Since(sent) > 3*ttl {
				t.Fatalf("%s did not run within %v", id, 3*ttl)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	t.Logf("B's signals: %d of %d ran more than 1s after they were sent; slowest %v (TTL %v)", slow, n, worst.Round(time.Millisecond), ttl)
	if slow > 0 {
		t.Errorf("%d threads stayed leased to A's dead runs after A's Close", slow)
	}
}
