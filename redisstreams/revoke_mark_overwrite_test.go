package redisstreams

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/lease"
)

// TestRevokeRetryAfterAnotherRevokeCall (helper 52's review): revoke.lua
// kept one nonce per lease key, the latest revoke call's. A call A that
// revoked the lease (its reply lost) and is then run again (go-redis's
// retry, or runLeaseMigrating's while the slot migrates) after another
// revoke call B overwrote the mark found B's nonce, not its own, and ran a
// second time: here it revoked the tenure of the owner who took the key
// after B freed it. Each call now has a mark of its own. The runs of A are simulated by sending revoke.lua twice with one nonce,
// exactly as a retry re-sends the same command.
func TestRevokeRetryAfterAnotherRevokeCall(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { c.Close() })
	b := psBackend(t, c, Options{})
	ctx := t.Context()
	const key = "victim"
	run := func(reason, force, nonce string) int64 {
		t.Helper()
		n, err := c.Eval(ctx, revokeScript.src, b.revokeCallKeys(key, nonce), reason, force, b.statusWindowMillis()).Int64()
		if err != nil {
			t.Fatalf("revoke.lua(%s): %v", reason, err)
		}
		return n
	}
	if r, err := b.AcquireLease(ctx, key, "old", time.Minute); err != nil || !r.Acquired {
		t.Fatalf("AcquireLease(old) = %+v, %v", r, err)
	}
	// Call A, RevokeLease (not forced): runs, its reply is lost.
	if n := run("A", "0", "nonceA"); n != 1 {
		t.Fatalf("A's first run = %d, want 1", n)
	}
	// Call B, ForceRevokeLease by another operator: frees the key.
	if n := run("B", "1", "nonceB"); n != 1 {
		t.Fatalf("B = %d, want 1", n)
	}
	// A new owner takes the key.
	if r, err := b.AcquireLease(ctx, key, "new", time.Minute); err != nil || !r.Acquired {
		t.Fatalf("AcquireLease(new) = %+v, %v", r, err)
	}
	// A's retry: the same command again.
	run("A", "0", "nonceA")
	st, err := b.LeaseState(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if st.Status == lease.StatusRevoked && st.Owner == "new" {
		t.Errorf("the retry of call A (which already revoked old's tenure) revoked new's tenure: %+v", st)
	}
}

// TestForceRevokeRetryAfterAnotherRevokeCallAnswersNotHeld (helper 52): the
// same overwrite, for a forced call A whose retry finds the key free after
// another call revoked the next tenure: A is told ErrNotHeld (0) although it
// revoked old's tenure.
func TestForceRevokeRetryAfterAnotherRevokeCallAnswersNotHeld(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { c.Close() })
	b := psBackend(t, c, Options{})
	ctx := t.Context()
	const key = "victim"
	run := func(reason, nonce string) int64 {
		t.Helper()
		n, err := c.Eval(ctx, revokeScript.src, b.revokeCallKeys(key, nonce), reason, "1", b.statusWindowMillis()).Int64()
		if err != nil {
			t.Fatalf("revoke.lua(%s): %v", reason, err)
		}
		return n
	}
	if r, err := b.AcquireLease(ctx, key, "old", time.Minute); err != nil || !r.Acquired {
		t.Fatalf("AcquireLease(old) = %+v, %v", r, err)
	}
	if n := run("A", "nonceA"); n != 1 {
		t.Fatalf("A's first run = %d, want 1", n)
	}
	if r, err := b.AcquireLease(ctx, key, "new", time.Minute); err != nil || !r.Acquired {
		t.Fatalf("AcquireLease(new) = %+v, %v", r, err)
	}
	if n := run("C", "nonceC"); n != 1 {
		t.Fatalf("C = %d, want 1", n)
	}
	if n := run("A", "nonceA"); n != 1 {
		t.Errorf("the retry of forced call A (which revoked old's tenure) = %d, want 1 (the caller gets ErrNotHeld)", n)
	}
}
