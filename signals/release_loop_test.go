package signals_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

// TestReleaseRepliesLostTenureLoop (review revV, a measurement): every
// release of thread h from runtime A loses its reply (the release runs, the
// connection is reset), so each tenure's release fails though the lease is
// free. At 4e6f429 a failed release was remembered and the thread tried as
// the tenure ended, free or not: a new tenure, whose release failed again,
// and so on for as long as the releases failed (15 tenures in 10s, one per
// first wait of 600ms). Now the thread is tried only while the lease is
// still the tenure's. It counts the tenures A starts for h in 5s with one
// signal sent, and fails above two.
func TestReleaseRepliesLostTenureLoop(t *testing.T) {
	t.Parallel() // mostly waits (TTLs, windows, a stalled server): beside another (CI time)
	const ttl = 2 * time.Second
	srv, _ := startRedis(t)
	proxy := redistest.NewProxy(t, srv.Addr())
	ctx := context.Background()
	var tenures, released atomic.Int32
	observe := signals.WithObserver(func(e signals.Event) {
		if e.Thread != "h" {
			return
		}
		switch e.Kind {
		case signals.TenureStarted, signals.Recovered:
			tenures.Add(1)
		case signals.Released:
			released.Add(1)
		}
	})
	a, _ := urlRuntime(t, "redis://"+proxy.Addr(), "relloop", "A", func(ctx context.Context, r *signals.Run) error { return nil }, nil,
		signals.WithLeaseTTL(ttl), signals.WithRecoveryInterval(100*time.Millisecond), signals.WithLinger(20*time.Millisecond), observe)
	look, err := redisstreams.NewURL(ctx, srv.URL(), redisstreams.Options{Prefix: "relloop"})
	if err != nil {
		t.Fatal(err)
	}
	defer look.Close()
	warmRelease(t, a, look)
	proxy.CutReplies(releaseWrite(t, "h"))
	if _, err := a.Send(ctx, "h", signals.Signal{ID: "first", Type: "t"}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Second)
	proxy.CutReplies(nil)
	n := tenures.Load()
	t.Logf("A started %d tenures of h in 5s (%d ended with a failed release) with one signal sent", n, released.Load())
	if n > 2 {
		t.Errorf("%d tenures in 5s: the takeover after a failed release loops", n)
	}
}
