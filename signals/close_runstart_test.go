package signals_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

// TestCloseRunStartingAtClose: on a healthy server, a run whose start (its
// RunStarted event, which a slow observer holds) straddles the moment
// Close(context.Background()) begins, and which returns just under a TTL
// after Close began. Close's doc: the teardown ends about a lease TTL after
// the last run returned, so the tenure still releases the lease. Review
// revR (helper 23): the run was counted only after its RunStarted event,
// so Close's timer started at Close, saw no run when it fired and cut the
// teardown 10-13ms after the run returned (eps 2ms and 10ms: the lease
// left held, "release failed ... context canceled").
func TestCloseRunStartingAtClose(t *testing.T) {
	t.Parallel() // mostly waits (TTLs, windows, a stalled server): beside another (CI time)
	for _, eps := range []time.Duration{2 * time.Millisecond, 10 * time.Millisecond, 50 * time.Millisecond} {
		t.Run(fmt.Sprint(eps), func(t *testing.T) {
			srv, _ := startRedis(t)
			ctx := context.Background()
			b, err := redisstreams.NewURL(ctx, srv.URL(), redisstreams.Options{Prefix: "rsc"})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			const ttl = 2 * time.Second
			var closeStart atomic.Int64
			entered := make(chan struct{}, 1)
			release := make(chan struct{})
			var ended atomic.Int64
			rt, err := signals.New(b, func(ctx context.Context, run *signals.Run) error {
				cs := time.Unix(0, closeStart.Load())
				time.Sleep(time.Until(cs.Add(ttl - eps)))
				ended.Store(time.Now().UnixNano())
				return nil
			}, signals.WithLeaseTTL(ttl), signals.WithLinger(time.Second),
				signals.WithObserver(func(e signals.Event) {
					if e.Kind == signals.RunStarted {
						select {
						case entered <- struct{}{}:
						default:
						}
						<-release // a slow observer
					}
				}))
			if err != nil {
				t.Fatal(err)
			}
			go func() { _, _ = rt.Send(ctx, "t", signals.Signal{Type: "msg"}) }()
			select {
			case <-entered:
			case <-time.After(10 * time.Second):
				t.Fatal("no run started")
			}
			closeStart.Store(time.Now().UnixNano())
			done := make(chan error, 1)
			go func() { done <- rt.Close(ctx) }()
			time.Sleep(100 * time.Millisecond)
			close(release)
			err = <-done
			ret := time.Now()
			o, gerr := b.GetLeaseOwner(ctx, signals.LeaseKey("t"))
			if gerr != nil {
				t.Fatal(gerr)
			}
			runEnd := time.Unix(0, ended.Load())
			t.Logf("Close = %v, returned %v after Close began, %v after the run returned; lease owner after Close: %q",
				err, ret.Sub(time.Unix(0, closeStart.Load())).Round(time.Millisecond), ret.Sub(runEnd).Round(time.Millisecond), o)
			if o != "" {
				t.Errorf("healthy server: the lease is still held after Close returned %v after the run returned (want released; teardown should have had about a TTL, %v, after the run)",
					ret.Sub(runEnd).Round(time.Millisecond), ttl)
			}
		})
	}
}
