package redisstreams

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/lease"
)

// The server stalls (SIGSTOP) past go-redis's ReadTimeout (5s by default)
// while TransferLease(a → b) is on the wire: go-redis retries the script on
// another connection, the server runs both as it resumes, and the retry
// finds b holding the lease. Found by review 7 of 2026-11-22: the retry
// answered "a no longer holds it", so a transfer that happened was reported
// refused (5 of 5 runs) and lease.Held.Transfer ended the Held with
// ErrNotHeld while b held the lease with a new token that nobody knew.
// transfer.lua now recognises its own retry (the state record names the
// owner a tenure came from) and answers with b's token.

// TestTransferRetriedAcrossStallReportsDone: TransferLease on NewURL
// defaults reports the transfer done.
func TestTransferRetriedAcrossStallReportsDone(t *testing.T) {
	t.Parallel()
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
	// transfer.lua cached on the server, so that the stalled call is one
	// EVALSHA (and its retry another).
	if _, err := b.AcquireLease(ctx, "warm", "x", time.Minute); err != nil {
		t.Fatal(err)
	}
	if ok, err := b.TransferLease(ctx, "warm", "x", "y", time.Minute); err != nil || !ok {
		t.Fatalf("warm transfer: %v %v", ok, err)
	}
	srv.Pause(t)
	resumed := make(chan struct{})
	time.AfterFunc(8*time.Second, func() { srv.Resume(t); close(resumed) })
	ok, err := b.TransferLease(ctx, "k", "a", "b", time.Minute)
	<-resumed
	owner, err2 := b.GetLeaseOwner(ctx, "k")
	t.Logf("TransferLease(a->b) = %v, %v; owner now %q (%v)", ok, err, owner, err2)
	if err == nil && !ok && owner == "b" {
		t.Fatal("TransferLease reported refused (a no longer holds it) but the lease was transferred to b")
	}
	if err == nil && ok && owner != "b" {
		t.Fatalf("TransferLease reported done but the owner is %q", owner)
	}
}

// TestHeldTransferRetriedAcrossStall: the same stall under a Keeper's
// lease.Held.Transfer.
func TestHeldTransferRetriedAcrossStall(t *testing.T) {
	t.Parallel()
	redistest.Require(t)
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	b, err := NewURL(ctx, srv.URL(), Options{Prefix: "tp"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	k := lease.NewKeeper(b, lease.KeeperOptions{})
	t.Cleanup(func() { k.Close() })
	w, err := k.Keep(ctx, "warm", "x", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Transfer(ctx, "y"); err != nil { // transfer.lua cached
		t.Fatal(err)
	}
	h, err := k.Keep(ctx, "k", "a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	srv.Pause(t)
	resumed := make(chan struct{})
	time.AfterFunc(6*time.Second, func() { srv.Resume(t); close(resumed) })
	nh, err := h.Transfer(ctx, "b")
	<-resumed
	owner, _ := b.GetLeaseOwner(ctx, "k")
	if nh != nil {
		t.Logf("Held.Transfer(a->b) = Held of %q token %d; owner now %q", nh.Owner(), nh.Token(), owner)
	} else {
		t.Logf("Held.Transfer(a->b) = %v; owner now %q", err, owner)
	}
	if errors.Is(err, lease.ErrNotHeld) && owner == "b" {
		t.Fatalf("Held.Transfer reported the transfer refused (%v) but the lease was transferred to b", err)
	}
	if err == nil && nh.Owner() != "b" {
		t.Fatalf("Held.Transfer returned a Held of %q", nh.Owner())
	}
}
