package redisstreams

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/lease"
)

// TestLeaseKeysGoAway checks the lifetime of everything a lease leaves in
// Redis: with FenceIdle and LeaseStatusWindow of 1s, a key released (or
// expired) leaves no key under the prefix once both have passed — the lease,
// its fencing counter, state record and revoked mark are all gone — and the
// key's next tenure still gets a token above every earlier one. A lease kept
// (renewed) for longer than FenceIdle keeps its counter, so its token stays
// readable and a re-acquire by the holder keeps it.
func TestLeaseKeysGoAway(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { c.Close() })
	b, err := New(c, Options{Prefix: "fx", FenceIdle: time.Second, LeaseStatusWindow: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	ctx := t.Context()
	const ttl = 300 * time.Millisecond

	r1 := mustAcquire(t, b, "k", "a", ttl)
	if !mustTransfer(t, b, "k", "a", "b", ttl) {
		t.Fatal("transfer a -> b = false")
	}
	r2 := mustAcquire(t, b, "k", "b", ttl) // the holder: reads the token
	if r2.Token <= r1.Token {
		t.Fatalf("token after transfer %d, not above %d", r2.Token, r1.Token)
	}
	if err := b.ReleaseLease(ctx, "k", "b"); err != nil {
		t.Fatal(err)
	}
	if err := b.RevokeLease(ctx, "k", "x"); err == nil {
		t.Fatal("revoke of a released key succeeded")
	}
	// A revoked lease: its state record, revoked mark and revoke call mark
	// go too.
	mustAcquire(t, b, "rv", "a", ttl)
	if err := b.ForceRevokeLease(ctx, "rv", "x"); err != nil {
		t.Fatal(err)
	}
	if ks, err := c.Keys(ctx, b.keys.LeaseRevokeCall("rv", "*")).Result(); err != nil || len(ks) != 1 {
		t.Fatalf("revoke call marks after a revoke: %q, %v; want 1", ks, err)
	}

	// The kept lease's TTL is a second, not ttl: renewed every third of a
	// 300ms TTL, it failed closed once on a loaded CI machine ("loss
	// deadline passed, no renewal completed in time"), as it must when a
	// renewal is that late. 3s is still more than its counter would last
	// unrenewed (keptTTL + FenceIdle).
	const keptTTL = time.Second
	h, err := lease.Keep(ctx, b, "kept", "a", keptTTL)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // three times FenceIdle, renewed all along
	if err := h.Err(); err != nil {
		t.Fatalf("kept lease lost: %v", err)
	}
	if again := mustAcquire(t, b, "kept", "a", keptTTL); again.Token != h.Token() {
		t.Fatalf("re-acquire by the holder after 3x FenceIdle: token %d, want %d (the counter must outlive the lease)", again.Token, h.Token())
	}
	keptTok := h.Token()
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// Everything goes: at most ttl + FenceIdle (counter) and the status
	// window after the last lease ended.
	deadline := time.Now().Add(10 * time.Second)
	for {
		keys, err := c.Keys(ctx, "fx*").Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(keys) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("keys left under the prefix 10s after the last lease ended: %q", keys)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if r3 := mustAcquire(t, b, "k", "c", ttl); r3.Token <= r2.Token {
		t.Fatalf("token of a tenure after the counter expired = %d, not above the earlier %d", r3.Token, r2.Token)
	}
	if r := mustAcquire(t, b, "kept", "c", ttl); r.Token <= keptTok {
		t.Fatalf("token of kept's next tenure = %d, not above the earlier %d", r.Token, keptTok)
	}
}
