package leasebusotel_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasebus/leasebus/inmem"
	"github.com/leasebus/leasebus/lease"
)

// h73ReadFails is a lease.Provider without TransferLeaseToken whose next
// AcquireLease, once armed, fails with err without running.
type h73ReadFails struct {
	lease.Provider
	err   error
	armed atomic.Bool
}

func (p *h73ReadFails) AcquireLease(ctx context.Context, key, owner string, ttl time.Duration) (lease.Result, error) {
	if p.armed.CompareAndSwap(true, false) {
		return lease.Result{}, p.err
	}
	return p.Provider.AcquireLease(ctx, key, owner, ttl)
}

// TestReviewH73WrappedTransferReadNotSent: on a provider without
// lease.TokenTransferer the wrapper's TransferLeaseToken transfers and then
// reads the new owner's token with AcquireLease. When that read fails with
// an error that says it did not run (lease.ErrNotSent: its ctx ended before
// it was sent; lease.ErrClosed), the wrapper's error wraps it, and
// lease.Held.Transfer, which since it fails closed keeps the Held live
// exactly on those two errors, takes the transfer as not run: the Held
// goes on being kept, reporting the lease live, while the backend already
// gave the key to the new owner (who wins it at once with AcquireLease or
// lease.Wait), until its next renewal is refused (a third of the TTL).
// Before, any transport error renewed at once, which ended it.
func TestReviewH73WrappedTransferReadNotSent(t *testing.T) {
	for name, readErr := range map[string]error{
		"NotSent": fmt.Errorf("ctx ended before it was sent (%w)", lease.ErrNotSent),
		"Closed":  fmt.Errorf("h73: %w", lease.ErrClosed),
	} {
		t.Run(name, func(t *testing.T) {
			b := inmem.New()
			defer b.Close()
			tm := newTelemetry(t)
			p := &h73ReadFails{Provider: b, err: readErr}
			w := tm.in.WrapProvider(p)
			ctx := context.Background()
			k := lease.NewKeeper(w, lease.KeeperOptions{})
			defer k.Close()
			h, err := k.Keep(ctx, "job", "a", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			p.armed.Store(true)
			nh, err := h.Transfer(ctx, "b")
			if err == nil {
				nh.Release(ctx)
				t.Fatal("premise: the transfer's token read did not fail")
			}
			t.Logf("Transfer(a -> b) = %v", err)
			owner, gerr := b.GetLeaseOwner(ctx, "job")
			if gerr != nil || owner != "b" {
				t.Fatalf("premise: the backend's owner is %q (%v), want b (the transfer ran)", owner, gerr)
			}
			if herr := h.Err(); herr == nil {
				t.Errorf("a's Held reports the lease live (Err nil) after Transfer returned %v, while the backend gave the key to b", err)
			}
			r, aerr := b.AcquireLease(ctx, "job", "b", time.Minute)
			if aerr != nil || !r.Acquired {
				t.Fatalf("AcquireLease by b: %+v, %v", r, aerr)
			}
			if h.Err() == nil {
				t.Errorf("b won the key (token %d) while a's Held (token %d) reports it live", r.Token, h.Token())
			}
		})
	}
}
