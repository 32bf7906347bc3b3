package lease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasebus/leasebus/inmem"
	"github.com/leasebus/leasebus/lease"
)

// singleRenewer hides the provider's BatchRenewer, so that Keep renews with
// RenewLease, whose error carries the revoke.
type singleRenewer struct{ lease.Provider }

// TestKeepEndsAtRevoke: a Held whose renewal reports the revoke ends with a
// cause matching ErrRevoked that carries the reason; the key stays with the
// revoked holder until its Release, then is free.
func TestKeepEndsAtRevoke(t *testing.T) {
	b := inmem.New()
	defer b.Close()
	ctx := context.Background()
	h, err := lease.Keep(ctx, singleRenewer{b}, "jobs/42", "worker-7", 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.RevokeLease(ctx, "jobs/42", "stuck since 03:00"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-h.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the Held did not end within 10s of the revoke (renewal every 100ms)")
	}
	var re *lease.RevokedError
	if err := h.Err(); !errors.Is(err, lease.ErrRevoked) || !errors.As(err, &re) || re.Reason != "stuck since 03:00" {
		t.Fatalf("Held.Err() = %v, want a cause matching ErrRevoked carrying the reason", err)
	}
	if cause := context.Cause(h.Context()); !errors.Is(cause, lease.ErrRevoked) {
		t.Fatalf("cause of the Held's Context = %v, want ErrRevoked", cause)
	}
	if r, err := b.AcquireLease(ctx, "jobs/42", "worker-8", time.Minute); err != nil || r.Acquired || r.Owner != "worker-7" {
		t.Fatalf("acquire by another owner before the release = %+v, %v; want lost to worker-7", r, err)
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if r, err := b.AcquireLease(ctx, "jobs/42", "worker-8", time.Minute); err != nil || !r.Acquired {
		t.Fatalf("acquire after the revoked holder released = %+v, %v; want acquired", r, err)
	}
}
