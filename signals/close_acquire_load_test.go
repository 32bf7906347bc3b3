package signals_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

// TestCloseOnStalledServerUnderAcquireLoad: Close's doc says that when its
// ctx ends, its teardown may take closeGrace (1s) after the last run
// returned and no longer, so on a server that stopped answering it returns
// about a second after the runs did. TestCloseOnStalledServerUnderLoad
// loads 200 threads that stay held (each gets a signal well within the
// linger time), so almost no acquire is in flight when the server stops.
// Here the same load goes to fresh threads (each Send wakes a thread no
// tenure holds), so acquires are in flight, in the lease combiner, when the
// server is stopped (SIGSTOP); Close(ctx 1s) must return within the same 5s.
//
// Found by review (rev2, 2026-11-27): 25.1-35.2s (4 of 4). Runtime.wake
// acquired with keeper.Keep(context.WithoutCancel(ctx), ...), a ctx that
// never ends, after it registered the session in rt.wg, which Close waits
// for, so the acquire was bounded only by go-redis's timeouts and retries;
// and the tenure's inbox Subscribe set its group up on context.Background
// (about 3s more, go-redis's ReadTimeout). Both now end when Close gives up
// (hardCtx; redisstreams' Subscribe setup returns when its ctx ends): 2.0s.
func TestCloseOnStalledServerUnderAcquireLoad(t *testing.T) {
	srv, _ := startRedis(t)
	ctx := context.Background()
	b, err := redisstreams.NewURL(ctx, srv.URL(), redisstreams.Options{Prefix: "rca"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	var ran, runs atomic.Int64
	agent := func(ctx context.Context, run *signals.Run) error {
		runs.Add(1)
		ran.Add(int64(len(run.Signals)))
		select {
		case <-time.After(time.Duration(rand.IntN(5)) * time.Millisecond):
		case <-ctx.Done():
		}
		return nil
	}
	rt, err := signals.New(b, agent, signals.WithLinger(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	const senders = 8
	sctx, stopSends := context.WithCancel(ctx)
	defer stopSends()
	var sent, next atomic.Int64
	var wg sync.WaitGroup
	for i := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; sctx.Err() == nil; n++ {
				th := fmt.Sprint("f", next.Add(1)) // a thread nobody holds
				if _, err := rt.Send(sctx, th, signals.Signal{ID: fmt.Sprintf("s%d-%d", i, n), Type: "msg"}); err == nil {
					sent.Add(1)
				}
			}
		}()
	}
	time.Sleep(3 * time.Second)
	srv.Pause(t)
	t.Cleanup(func() { srv.Resume(t) })
	time.Sleep(50 * time.Millisecond)
	stopSends()
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	start := time.Now()
	diag := time.AfterFunc(4*time.Second, func() { logStuck(t) })
	defer diag.Stop()
	err = rt.Close(cctx)
	d := time.Since(start)
	t.Logf("before the stall: %d sent, %d runs, %d signals run; Close = %v after %v", sent.Load(), runs.Load(), ran.Load(), err, d.Round(time.Millisecond))
	if d > 5*time.Second {
		t.Errorf("Close(ctx 1s) on a server stalled under acquire load took %v, want at most 5s", d.Round(time.Millisecond))
	}
	srv.Resume(t)
	wg.Wait()
}
