package signals_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasebus/leasebus/inmem"
	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/signals"
)

// h73LostTransfer is an inmem backend whose next transfer, once armed,
// fails with a transport error: the request or its reply was lost in the
// network. With ran it runs first (its reply was lost), else it never runs
// (the request was lost).
type h73LostTransfer struct {
	*inmem.Backend
	ran   bool
	armed atomic.Bool
	hit   atomic.Int32
}

var errH73Lost = errors.New("h73: i/o timeout (the transfer's request or reply was lost)")

func (x *h73LostTransfer) TransferLeaseToken(ctx context.Context, key, from, to string, ttl time.Duration) (uint64, error) {
	if x.armed.CompareAndSwap(true, false) {
		x.hit.Add(1)
		if x.ran {
			_, _ = x.Backend.TransferLeaseToken(ctx, key, from, to, ttl)
		}
		return 0, errH73Lost
	}
	return x.Backend.TransferLeaseToken(ctx, key, from, to, ttl)
}

func (x *h73LostTransfer) TransferLease(ctx context.Context, key, from, to string, ttl time.Duration) (bool, error) {
	tok, err := x.TransferLeaseToken(ctx, key, from, to, ttl)
	return tok > 0, err
}

// TestReviewH73HandOffTransferLostIsTakenOver: a hand-off whose transfer
// fails with a transport error now ends the tenure at once
// (lease.Held.Transfer fails closed: lease.ErrTransferUnknown), with its
// lease lost. When the transfer ran (Ran: its reply was lost) the thread
// is leased to the hand-off's next run, which never starts here, and the
// runtime takes it over for that run (givenup.go). When it did not run
// (NotRun: its request was lost), the lease is still the ended tenure's:
// nobody renews it, nobody releases it (a tenure that ends with its lease
// lost releases only a revoked one), and the takeover's try finds it held
// by an owner it does not remember, so the queued signal waits for that
// lease's whole TTL. Before lease.Held.Transfer failed closed the Held
// lived on, its renewal succeeded and the tenure ran the signal at once.
// Held.Transfer's doc says what to do: Release the Held (with its token:
// a transfer that runs after the release is refused).
func TestReviewH73HandOffTransferLostIsTakenOver(t *testing.T) {
	for _, tc := range []struct {
		name string
		ran  bool
	}{{"NotRun", false}, {"Ran", true}} {
		t.Run(tc.name, func(t *testing.T) { testH73HandOffLost(t, tc.ran) })
	}
}

func testH73HandOffLost(t *testing.T, ran bool) {
	const ttl = 8 * time.Second
	b := newBackend(t)
	x := &h73LostTransfer{Backend: b, ran: ran}
	var (
		mu      sync.Mutex
		runs    = map[string]int{}
		active  int
		overlap int
		release = make(chan struct{})
		queued  = make(chan time.Time, 1)
	)
	agent := func(ctx context.Context, r *signals.Run) error {
		mu.Lock()
		active++
		if active > 1 {
			overlap++
		}
		for _, s := range r.Signals {
			runs[s.ID]++
			if s.ID == "queued" {
				select {
				case queued <- time.Now():
				default:
				}
			}
		}
		first := r.Signals[0].ID == "first"
		mu.Unlock()
		if first {
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		mu.Lock()
		active--
		mu.Unlock()
		return nil
	}
	var lost, handedOff atomic.Int32
	observe := signals.WithObserver(func(e signals.Event) {
		switch e.Kind {
		case signals.LeaseLost:
			if errors.Is(e.Err, lease.ErrTransferUnknown) {
				lost.Add(1)
			}
		case signals.HandedOff:
			handedOff.Add(1)
		}
	})
	rt := newRuntime(t, x, agent, signals.WithLeaseTTL(ttl), signals.WithLinger(time.Second), observe)
	ctx := t.Context()
	if acc, err := rt.Send(ctx, "h", sig("first")); err != nil || acc.Action != signals.Woke {
		t.Fatalf("first Send: %+v, %v", acc, err)
	}
	for {
		mu.Lock()
		n := runs["first"]
		mu.Unlock()
		if n > 0 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if acc, err := rt.Send(ctx, "h", sig("queued")); err != nil || acc.Action != signals.Delivered {
		t.Fatalf("queued Send: %+v, %v", acc, err)
	}
	x.armed.Store(true)
	ended := time.Now()
	close(release)
	var took time.Duration
	select {
	case at := <-queued:
		took = at.Sub(ended)
	case <-time.After(ttl + 3*time.Second):
		t.Fatalf("the queued signal did not run within %v of the first run's end (TTL %v)", ttl+3*time.Second, ttl)
	}
	t.Logf("the queued signal ran %v after the first run ended (TTL %v)", took.Round(time.Millisecond), ttl)
	if x.hit.Load() != 1 || lost.Load() != 1 || handedOff.Load() != 0 {
		t.Errorf("premise: %d transfers failed, %d LeaseLost events with ErrTransferUnknown, %d HandedOff; want 1, 1, 0", x.hit.Load(), lost.Load(), handedOff.Load())
	}
	if took > 1500*time.Millisecond {
		t.Errorf("after a hand-off whose transfer failed (ran %v), the queued signal ran %v after the first run ended, want within 1.5s (TTL %v): the ended tenure's lease was left to expire",
			ran, took.Round(time.Millisecond), ttl)
	}
	time.Sleep(300 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if runs["queued"] != 1 || overlap != 0 {
		t.Errorf("the queued signal ran %d times (want 1), %d runs overlapped (want 0)", runs["queued"], overlap)
	}
}
