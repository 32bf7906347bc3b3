package redisstreams

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/lease"
)

// TestLateForceRevokeTokenSparesNextTenure: an operator force-revokes a
// dead holder's tenure, naming its token (read with LeaseState); the call
// is held in the network past its ctx, the dead holder's lease expires and
// w2 wins the key; then the network delivers the revoke. Review h70 saw a
// ForceRevokeLease so delivered free w2's live tenure
// (TestReviewH70LateForceRevokeHitsNextTenure, not merged: the untokened
// call cannot tell the tenures apart). ForceRevokeLeaseToken and
// RevokeLeaseToken (lease.TokenRevoker) apply only to the tenure of their
// token, so w2's tenure is left alone, and the call reported no live
// lease in that tenure had it run on time.
func TestLateForceRevokeTokenSparesNextTenure(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	for _, force := range []bool{true, false} {
		name := "Revoke"
		if force {
			name = "ForceRevoke"
		}
		t.Run(name, func(t *testing.T) {
			proxy, op, other := h70Pair(t, srv, "rvtok"+name)
			ctx := t.Context()
			tr, ok := any(op).(lease.TokenRevoker)
			if !ok {
				t.Fatalf("%T does not implement lease.TokenRevoker", op)
			}
			revoke := func(ctx context.Context, key, reason string, token uint64) error {
				if force {
					return tr.ForceRevokeLeaseToken(ctx, key, reason, token)
				}
				return tr.RevokeLeaseToken(ctx, key, reason, token)
			}
			// revoke.lua cached, so that the held call is an EVALSHA.
			if _, err := other.AcquireLease(ctx, "warm", "x", time.Minute); err != nil {
				t.Fatal(err)
			}
			if err := op.RevokeLease(ctx, "warm", "warm-up"); err != nil {
				t.Fatal(err)
			}
			const ttl = time.Second
			r1, err := other.AcquireLease(ctx, "job", "w1", ttl) // w1 dies: never renewed
			if err != nil || !r1.Acquired {
				t.Fatalf("w1: %+v %v", r1, err)
			}
			st, err := op.LeaseState(ctx, "job")
			if err != nil || st.Token != r1.Token || st.Owner != "w1" {
				t.Fatalf("LeaseState = %+v, %v; want w1's tenure, token %d", st, err, r1.Token)
			}
			proxy.HoldNext(h70Script(revokeScript))
			rctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			err = revoke(rctx, "job", "stuck", st.Token)
			cancel()
			if err == nil {
				t.Fatal("the revoke was to be held in the network")
			}
			var r2 lease.Result
			deadline := time.Now().Add(5 * time.Second)
			for {
				if r2, err = other.AcquireLease(ctx, "job", "w2", time.Minute); err != nil {
					t.Fatal(err)
				}
				if r2.Acquired {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("w2 did not win the key within 5s of w1's lease")
				}
				time.Sleep(20 * time.Millisecond)
			}
			if n := proxy.Release(); n != 1 {
				t.Fatalf("released %d held connections, want 1", n)
			}
			// Release returns once the server answered the held call.
			after, err := other.LeaseState(ctx, "job")
			if err != nil {
				t.Fatal(err)
			}
			if after.Owner != "w2" || after.Token != r2.Token || after.Status != lease.StatusActive || !after.Live() {
				t.Errorf("after the late revoke of w1's tenure (token %d): %+v; want w2's tenure (token %d) active and live", r1.Token, after, r2.Token)
			}
			if ok, err := other.RenewLease(ctx, "job", "w2", time.Minute); err != nil || !ok {
				t.Errorf("w2's renewal after the late revoke = %v, %v; want true, nil", ok, err)
			}
			// On time, the same call reports that the tenure is gone.
			if err := revoke(ctx, "job", "stuck", r1.Token); !errors.Is(err, lease.ErrNotHeld) {
				t.Errorf("revoke of w1's ended tenure while w2 holds the key = %v, want ErrNotHeld", err)
			}
			// And the live tenure's own token revokes it.
			if err := revoke(ctx, "job", "now", r2.Token); err != nil {
				t.Errorf("revoke of w2's tenure by its token: %v", err)
			}
			if st, err := other.LeaseState(ctx, "job"); err != nil || st.Status != lease.StatusRevoked || st.Token != r2.Token || st.Forced != force {
				t.Errorf("after revoking w2's tenure: %+v, %v", st, err)
			}
		})
	}
}
