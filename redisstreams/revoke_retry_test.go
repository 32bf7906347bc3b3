package redisstreams

import (
	"bytes"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/lease"
)

// TestForceRevokeRetriedAfterLostReply: a ForceRevokeLease whose reply is
// lost (the connection is reset after the request left, as a proxy or load
// balancer does) on a client with go-redis's defaults, which sends the
// command again on a new connection. The first run revoked the lease and
// deleted its key; the second run used to find no live lease, so the call
// returned lease.ErrNotHeld ("has no live lease to revoke") for a lease it
// had revoked, and had a new owner taken the freed key in between, it would
// have revoked that owner's tenure. revoke.lua now keeps the call's nonce
// (the revoke call mark): the second run reports the revoke done and
// touches nothing. A later revoke call with a nonce of its own is refused
// as before.
func TestForceRevokeRetriedAfterLostReply(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	proxy := redistest.NewProxy(t, srv.Addr())
	c := redis.NewClient(&redis.Options{Addr: proxy.Addr()}) // go-redis's defaults: MaxRetries 3
	t.Cleanup(func() { c.Close() })
	b := psBackend(t, c, Options{})
	ctx := t.Context()
	const reason = "lost-reply-marker"
	if r, err := b.AcquireLease(ctx, "victim", "old", time.Minute); err != nil || !r.Acquired {
		t.Fatalf("AcquireLease(old) = %+v, %v", r, err)
	}

	// The script cached, so that the write cut is the one that runs it
	// (not an EVALSHA answered NOSCRIPT).
	if r, err := b.AcquireLease(ctx, "warm", "o", time.Minute); err != nil || !r.Acquired {
		t.Fatalf("AcquireLease(warm) = %+v, %v", r, err)
	}
	if err := b.RevokeLease(ctx, "warm", "warm-up"); err != nil {
		t.Fatal(err)
	}

	var cut atomic.Int32
	proxy.CutReplies(func(w []byte) bool {
		// The first write that carries the revoke loses its reply.
		return bytes.Contains(w, []byte(reason)) && cut.CompareAndSwap(0, 1)
	})
	err := b.ForceRevokeLease(ctx, "victim", reason)
	proxy.CutReplies(nil)
	if cut.Load() != 1 {
		t.Fatalf("no revoke write was cut: the test's premise failed")
	}
	if err != nil {
		t.Errorf("ForceRevokeLease after a lost reply = %v, want nil: the lease was revoked (its retry must say so)", err)
	}
	st, err := b.LeaseState(ctx, "victim")
	if err != nil || st.Status != lease.StatusRevoked || !st.Forced || st.Owner != "old" {
		t.Errorf("state after the revoke = %+v, %v; want old's tenure revoked, forced", st, err)
	}

	// A new tenure, and a new revoke call: revoked as any other.
	if r, err := b.AcquireLease(ctx, "victim", "new", time.Minute); err != nil || !r.Acquired {
		t.Fatalf("AcquireLease(new) after the forced revoke = %+v, %v", r, err)
	}
	if err := b.ForceRevokeLease(ctx, "victim", "second"); err != nil {
		t.Fatalf("a second revoke call: %v", err)
	}
	if err := b.ForceRevokeLease(ctx, "victim", "third"); !errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("a revoke call of a key with no lease = %v, want lease.ErrNotHeld", err)
	}
}
