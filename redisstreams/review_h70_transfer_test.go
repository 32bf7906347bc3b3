package redisstreams

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/lease"
)

// Review h70. A request the network delivers late (HoldNext: a TCP
// retransmission after a partition heals, delivered after the client gave
// up on it) is something this package already guards group reads against
// (read.lua's sequence number, TestLateReadAfterChecksRunsNothing). The
// lease scripts that change who holds a key have no such guard.

// h70Pair returns a Backend reaching srv through a proxy (the holder) and
// one reaching it directly (the other process), both from NewURL with the
// same prefix.
func h70Pair(t *testing.T, srv *redistest.Server, prefix string) (*redistest.Proxy, *Backend, *Backend) {
	t.Helper()
	proxy := redistest.NewProxy(t, srv.Addr())
	hb, err := NewURL(t.Context(), "redis://"+proxy.Addr()+"/0", Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hb.Close() })
	other, err := NewURL(t.Context(), srv.URL(), Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Close() })
	return proxy, hb, other
}

func h70Script(s *luaScript) func([]byte) bool {
	return func(w []byte) bool { return bytes.Contains(w, []byte(s.sha)) }
}

// TestReviewH70LateTransferAfterRenewal: Held.Transfer(a → b) is held in
// the network past its ctx, and the network delivers it later. Before the
// fix the Held went on being kept and was renewed at once ("renewal tells
// whether the transfer happened"): the renewal succeeded, since the
// transfer had not reached the server; then the transfer landed, b held the
// key with a new token, and a process waiting as b (lease.Wait, or
// AcquireLease by b, which refreshes b's lease) won at once while a's Held
// still reported the lease live (Err nil) for up to its loss deadline
// (failed 7 of 7). lease/doc.go: "the holder has stopped before anyone else
// can hold the key". Now a Transfer of unknown outcome ends the Held at
// once (ErrNotHeld), so it has ended before the late transfer can land.
func TestReviewH70LateTransferAfterRenewal(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	for _, tc := range []struct {
		name      string
		blackHole bool // the holder's network fails right after the transfer lands
	}{{"NetworkUp", false}, {"NetworkDownAfter", true}} {
		t.Run(tc.name, func(t *testing.T) {
			proxy, hb, other := h70Pair(t, srv, "h70t"+tc.name)
			ctx := t.Context()
			// transfer.lua cached, so that the held call is an EVALSHA.
			if _, err := hb.AcquireLease(ctx, "warm", "x", time.Minute); err != nil {
				t.Fatal(err)
			}
			if ok, err := hb.TransferLease(ctx, "warm", "x", "y", time.Minute); err != nil || !ok {
				t.Fatalf("warm transfer: %v %v", ok, err)
			}
			k := lease.NewKeeper(hb, lease.KeeperOptions{})
			t.Cleanup(func() { k.Close() })
			const ttl = 3 * time.Second
			h, err := k.Keep(ctx, "job", "a", ttl)
			if err != nil {
				t.Fatal(err)
			}
			proxy.HoldNext(h70Script(transferScript))
			tctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			nh, err := h.Transfer(tctx, "b")
			cancel()
			if err == nil {
				t.Fatalf("Transfer returned a Held of %s; the proxy was to hold it", nh.Owner())
			}
			t.Logf("Transfer(a -> b) = %v", err)
			if !errors.Is(err, lease.ErrNotHeld) || !errors.Is(h.Err(), lease.ErrNotHeld) {
				t.Fatalf("after a Transfer of unknown outcome: Transfer = %v, Held Err = %v; want both to wrap ErrNotHeld (the transfer may still run)", err, h.Err())
			}
			select {
			case <-h.Context().Done():
			default:
				t.Fatal("the Held's Context is not done after a Transfer of unknown outcome")
			}
			// The network delivers the transfer now.
			if n := proxy.Release(); n != 1 {
				t.Fatalf("released %d held connections, want 1", n)
			}
			if tc.blackHole {
				proxy.BlackHole()
				t.Cleanup(proxy.Restore)
			}
			landed := time.Now()
			owner, err := other.GetLeaseOwner(ctx, "job")
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("owner after the late transfer: %q", owner)
			r, err := other.AcquireLease(ctx, "job", "b", ttl) // b's lease.Wait would do this
			if err != nil {
				t.Fatal(err)
			}
			if !r.Acquired {
				t.Skipf("the late transfer did not land (owner %q)", r.Owner)
			}
			if h.Err() == nil {
				// How long a goes on believing it holds the key.
				for h.Err() == nil && time.Since(landed) < 2*ttl {
					time.Sleep(5 * time.Millisecond)
				}
				t.Errorf("b won the key (token %d, a's %d) right after the late transfer landed, while a's Held reported it live; a's Held ended only %v after the transfer landed (TTL %v): %v",
					r.Token, h.Token(), time.Since(landed).Round(time.Millisecond), ttl, h.Err())
			}
		})
	}
}
