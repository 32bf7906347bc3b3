package signals_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/signals"
)

// TestQueuedAcquireNeverSentSettlesNothing (review revM, helper 18): with the lease lane's two batches
// in flight to a stopped server, a third Send's acquire waits in the
// combiner queue and its 200ms ctx ends before it is sent: the backend
// reports it as not sent (no "may have run"), yet the runtime settles it as
// an unknown outcome and a Recovered tenure of that thread starts after the
// resume, although nothing was sent for it and nothing is in its inbox
// (3 of 3 runs; TestSendOnEndedCtxLeavesNothing treats such a tenure as a
// defect for a ctx that ended before the acquire). The backend's error now
// matches lease.ErrNotSent, and the runtime settles only acquires that
// may have run. The test also requires that the not-sent error says so.
func TestQueuedAcquireNeverSentSettlesNothing(t *testing.T) {
	t.Parallel() // mostly waits (TTLs, windows, a stalled server): beside another (CI time)
	srv, _ := startRedis(t)
	ctx := context.Background()
	var (
		mu  sync.Mutex
		evs []string
	)
	rt, _ := urlRuntime(t, srv.URL(), "queuedacq", "A", func(ctx context.Context, r *signals.Run) error {
		return eachSignal(ctx, r, func(signals.Signal) {})
	}, nil, signals.WithObserver(func(e signals.Event) {
		mu.Lock()
		evs = append(evs, e.Kind.String()+" "+e.Thread)
		mu.Unlock()
	}))
	srv.Pause(t)
	var wg sync.WaitGroup
	for _, th := range []string{"q1", "q2"} {
		wg.Go(func() {
			sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			_, _ = rt.Send(sctx, th, signals.Signal{ID: th, Type: "t"})
		})
	}
	time.Sleep(100 * time.Millisecond)
	sctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err := rt.Send(sctx, "q3", signals.Signal{ID: "q3", Type: "t"})
	cancel()
	t.Logf("Send q3: %v", err)
	time.Sleep(300 * time.Millisecond)
	srv.Resume(t)
	wg.Wait()
	time.Sleep(2 * time.Second)
	mu.Lock()
	defer mu.Unlock()
	t.Logf("events: %v", evs)
	if !errors.Is(err, lease.ErrNotSent) {
		t.Errorf("Send q3, whose acquire waited in the queue: %v, want an error matching lease.ErrNotSent", err)
	}
	if err != nil && !strings.Contains(err.Error(), "may have run") {
		for _, e := range evs {
			if e == "recovered q3" || e == "tenure-started q3" {
				t.Errorf("an acquire never sent (%v) left a tenure behind: %s", err, e)
			}
		}
	}
}
