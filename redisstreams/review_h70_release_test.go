package redisstreams

import (
	"context"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/lease"
)

// TestReviewH70LateReleaseEndsLaterTenure: Held.Release is held in the
// network past its ctx and returns the error; the caller calls Release
// again, as its doc says ("a later call tries again"), and it succeeds.
// The same worker (owner "w1", as a process names itself) keeps the key
// again later: a new tenure, a new token. Then the network delivers the
// first release: release.lua checks only the owner's name, so it deletes
// the new tenure, and another worker acquires the key while w1's new Held
// reports it live until its next renewal is refused.
func TestReviewH70LateReleaseEndsLaterTenure(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	proxy, hb, other := h70Pair(t, srv, "h70r")
	ctx := t.Context()
	if _, err := hb.AcquireLease(ctx, "warm", "x", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := hb.ReleaseLease(ctx, "warm", "x"); err != nil { // release.lua cached
		t.Fatal(err)
	}
	k := lease.NewKeeper(hb, lease.KeeperOptions{})
	t.Cleanup(func() { k.Close() })
	const ttl = 3 * time.Second
	h1, err := k.Keep(ctx, "job", "w1", ttl)
	if err != nil {
		t.Fatal(err)
	}
	proxy.HoldNext(h70Script(releaseScript))
	rctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err = h1.Release(rctx)
	cancel()
	if err == nil {
		t.Fatal("the release was to be held")
	}
	t.Logf("Release = %v", err)
	if err := h1.Release(ctx); err != nil {
		t.Fatalf("second Release: %v", err)
	}
	h2, err := k.Keep(ctx, "job", "w1", ttl)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("w1 keeps the key again: token %d (was %d)", h2.Token(), h1.Token())
	proxy.Release()
	landed := time.Now()
	r, err := other.AcquireLease(ctx, "job", "w2", ttl)
	if err != nil {
		t.Fatal(err)
	}
	if r.Acquired && h2.Err() == nil {
		for h2.Err() == nil && time.Since(landed) < 2*ttl {
			time.Sleep(5 * time.Millisecond)
		}
		t.Errorf("w2 acquired the key (token %d) while w1's new tenure (token %d) was live: the late release of w1's previous tenure deleted it; w1's Held ended %v later: %v",
			r.Token, h2.Token(), time.Since(landed).Round(time.Millisecond), h2.Err())
	}
}
