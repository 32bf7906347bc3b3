package redisstreams

import (
	"errors"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/lease"
)

// TestReviewH77RevokeTokenAcrossFenceIdle: revoke.lua compares the token
// with the fencing counter, which expires Options.FenceIdle after the lease
// could last. A lease kept well past FenceIdle (renewals, refreshes) keeps
// its counter, so a revoke naming the token read from LeaseState (as
// `leasebus leases revoke` does) still hits the tenure; after a transfer
// the old token no longer names the live tenure and touches nothing.
func TestReviewH77RevokeTokenAcrossFenceIdle(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t, redistest.Options{})
	b := urlBackend(t, srv.URL(), Options{FenceIdle: time.Second})
	ctx := t.Context()
	const ttl = 500 * time.Millisecond
	res, err := b.AcquireLease(ctx, "k", "w1", ttl)
	if err != nil || !res.Acquired {
		t.Fatalf("acquire: %+v, %v", res, err)
	}
	// 3s of renewals (RenewLease and AcquireLease's refresh) with TTL 0.5s
	// and FenceIdle 1s.
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); {
		if ok, err := b.RenewLease(ctx, "k", "w1", ttl); err != nil || !ok {
			t.Fatalf("renew: %v, %v", ok, err)
		}
		time.Sleep(100 * time.Millisecond)
		if r, err := b.AcquireLease(ctx, "k", "w1", ttl); err != nil || !r.Acquired || r.Token != res.Token {
			t.Fatalf("refresh: %+v, %v (token at acquire %d)", r, err, res.Token)
		}
		time.Sleep(100 * time.Millisecond)
	}
	st, err := b.LeaseState(ctx, "k")
	if err != nil || st.Token != res.Token || !st.Live() {
		t.Fatalf("state %+v, %v; want live with token %d", st, err, res.Token)
	}
	// Transferred: the old token names an ended tenure.
	tok2, err := b.TransferLeaseToken(ctx, "k", "w1", "w2", ttl*10)
	if err != nil || tok2 <= res.Token {
		t.Fatalf("transfer: %d, %v", tok2, err)
	}
	if err := b.ForceRevokeLeaseToken(ctx, "k", "old tenure", res.Token); !errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("force revoke of the transferred-away token: %v, want ErrNotHeld", err)
	}
	if ok, err := b.RenewLease(ctx, "k", "w2", ttl*10); err != nil || !ok {
		t.Fatalf("w2's renewal after the stale revoke: %v, %v", ok, err)
	}
	if err := b.RevokeLeaseToken(ctx, "k", "w2's tenure", tok2); err != nil {
		t.Fatalf("revoke of w2's token: %v", err)
	}
	if _, err := b.RenewLease(ctx, "k", "w2", ttl*10); !errors.Is(err, lease.ErrRevoked) {
		t.Fatalf("w2's renewal after the revoke of its token: %v, want ErrRevoked", err)
	}
}
