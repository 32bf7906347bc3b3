package redisstreams

import (
	"context"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
)

// TestStaleTransferRefused: TransferLease "reports false when fromOwner
// does not hold a live lease". After a → b completed, another
// TransferLease(a → b) (a stale owner's own call, not a go-redis retry of
// the first) is refused. Found by review 8 of 2026-11-22: the first
// version of the retry recognition (TestTransferRetriedAcrossStallReportsDone)
// answered it with b's token; now only a call with the same nonce counts as
// the retry.
func TestStaleTransferRefused(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	b, err := NewURL(ctx, srv.URL(), Options{Prefix: "tp"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	if r, err := b.AcquireLease(ctx, "k", "a", time.Minute); err != nil || !r.Acquired {
		t.Fatalf("acquire: %v %+v", err, r)
	}
	if ok, err := b.TransferLease(ctx, "k", "a", "b", time.Minute); err != nil || !ok {
		t.Fatalf("first transfer: %v %v", ok, err)
	}
	ok, err := b.TransferLease(ctx, "k", "a", "b", time.Minute)
	owner, _ := b.GetLeaseOwner(ctx, "k")
	if err != nil || ok {
		t.Fatalf("second TransferLease(a->b) by a, which holds nothing (owner %q) = %v, %v; want false", owner, ok, err)
	}
}
