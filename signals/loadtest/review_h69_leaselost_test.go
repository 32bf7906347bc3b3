package loadtest_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

// TestReviewH69LeaseLostEventTiming (review h69): A runs x0 on thread x
// (its agent waits for its ctx), then A's path to Redis is black-holed
// (redistest.Proxy; NewURL with go-redis's defaults; TTL 2s). It asserts
// that A's run ctx is cancelled before B's run of x starts, and measures
// when A's LeaseLost event comes: 15.3s after the hole, 13.3s after B's
// run of x0 started, on the day it was written (A's tenure ended, and
// emitted it, only once its inbox subscription's clean-up gave up); now it
// asserts it comes within 2s of the run's end.
func TestReviewH69LeaseLostEventTiming(t *testing.T) {
	srv, _ := startRedis(t)
	proxy := redistest.NewProxy(t, srv.Addr())
	ctx := context.Background()
	const ttl = 2 * time.Second
	var mu sync.Mutex
	times := map[string]time.Time{}
	note := func(k string) {
		mu.Lock()
		if _, ok := times[k]; !ok {
			times[k] = time.Now()
		}
		mu.Unlock()
	}
	agent := func(proc string) signals.Agent {
		return func(ctx context.Context, r *signals.Run) error {
			note(proc + " run " + r.Signals[0].ID)
			<-ctx.Done()
			note(proc + " cancelled " + r.Signals[0].ID)
			return nil
		}
	}
	mk := func(id, url string) (*signals.Runtime, *redisstreams.Backend) {
		b, err := redisstreams.NewURL(ctx, url, redisstreams.Options{Prefix: "h69ll"})
		if err != nil {
			t.Fatal(err)
		}
		rt, err := signals.New(b, agent(id), signals.WithProcessID(id), signals.WithLeaseTTL(ttl),
			signals.WithRecoveryInterval(200*time.Millisecond),
			signals.WithObserver(func(e signals.Event) {
				if e.Kind == signals.LeaseLost || e.Kind == signals.Released {
					note(id + " " + e.Kind.String())
				}
			}))
		if err != nil {
			t.Fatal(err)
		}
		return rt, b
	}
	a, ab := mk("A", "redis://"+proxy.Addr()+"/0")
	b, bb := mk("B", srv.URL())
	defer func() {
		for _, x := range []struct {
			rt *signals.Runtime
			b  *redisstreams.Backend
		}{{b, bb}, {a, ab}} {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_ = x.rt.Close(cctx)
			cancel()
			_ = x.b.Close()
		}
	}()
	if _, err := a.Send(ctx, "x", signals.Signal{ID: "x0", Type: "t"}); err != nil {
		t.Fatal(err)
	}
	for {
		mu.Lock()
		_, ok := times["A run x0"]
		mu.Unlock()
		if ok {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	proxy.BlackHole()
	holed := time.Now()
	restored := false
	defer func() {
		if !restored {
			proxy.Restore()
		}
	}()
	for time.Since(holed) < 20*time.Second {
		time.Sleep(50 * time.Millisecond)
		mu.Lock()
		_, bRan := times["B run x0"]
		_, lost := times["A lease-lost"]
		mu.Unlock()
		if lost && bRan {
			break
		}
	}
	proxy.Restore()
	restored = true
	time.Sleep(time.Second)
	mu.Lock()
	defer mu.Unlock()
	for _, k := range []string{"A run x0", "A cancelled x0", "B run x0", "A lease-lost"} {
		if v, ok := times[k]; ok {
			t.Logf("%-16s %+.3fs from the hole", k, v.Sub(holed).Seconds())
		} else {
			t.Logf("%-16s never", k)
		}
	}
	cancelled, ok1 := times["A cancelled x0"]
	bRun, ok2 := times["B run x0"]
	if !ok1 || !ok2 || !cancelled.Before(bRun) {
		t.Errorf("A's run ctx was not cancelled before B's run of x started")
	}
	// options.go: LeaseLost comes once the run returned, before the
	// tenure's clean-up. Before that, it came as the tenure ended, after
	// its inbox subscription's clean-up (cleanupTimeout, 10s, on a server
	// that does not answer): 13.3s after B's run of x started. A generous
	// bound: 2s after A's run returned (its ctx cancelled).
	lost, ok := times["A lease-lost"]
	switch {
	case !ok:
		t.Errorf("A's LeaseLost never came (20s after the hole)")
	case ok1 && lost.Sub(cancelled) > 2*time.Second:
		t.Errorf("A's LeaseLost came %v after its run's ctx was cancelled (%v after B's run of x started), want within 2s",
			lost.Sub(cancelled).Round(time.Millisecond), lost.Sub(bRun).Round(time.Millisecond))
	default:
		t.Logf("A's LeaseLost came %v after its run's ctx was cancelled", lost.Sub(cancelled).Round(time.Millisecond))
	}
}
