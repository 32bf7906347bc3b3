package leasebusotel_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasebus/leasebus/inmem"
	"github.com/leasebus/leasebus/lease"
)

// countSpans returns how many ended spans are named name.
func (tm *telemetry) countSpans(name string) int {
	n := 0
	for _, s := range tm.spans.GetSpans() {
		if s.Name == name {
			n++
		}
	}
	return n
}

// TestWrappedTransferIsOneCall: a lease.Held's hand-off through the wrapper
// is one transfer call (lease.TokenTransferer), as on the bare backend, and
// the new Held has the token the backend gives the new owner. Before the
// wrapper had TransferLeaseToken, lease.Keeper read the token with an
// AcquireLease after the transfer: two lease calls per hand-off, which the
// signals runtime makes at every run with signals queued behind it. On a
// provider without TransferLeaseToken the wrapper reads the token that way
// itself, in the one "lease transfer" span.
func TestWrappedTransferIsOneCall(t *testing.T) {
	b := inmem.New()
	defer b.Close()
	for name, p := range map[string]lease.Provider{
		"token transferer":           b,
		"without TransferLeaseToken": withLease{b, b},
	} {
		t.Run(name, func(t *testing.T) {
			tm := newTelemetry(t)
			w := tm.in.WrapProvider(p)
			if _, ok := w.(lease.TokenTransferer); !ok {
				t.Fatal("the wrapper is not a lease.TokenTransferer")
			}
			ctx := context.Background()
			k := lease.NewKeeper(w, lease.KeeperOptions{})
			defer k.Close()
			key := "xfer-" + name
			h, err := k.Keep(ctx, key, "a", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			acquires := tm.countSpans("lease acquire")
			h2, err := h.Transfer(ctx, "b")
			if err != nil {
				t.Fatal(err)
			}
			defer h2.Release(ctx)
			if n := tm.countSpans("lease acquire") - acquires; n != 0 {
				t.Errorf("the hand-off made %d acquire calls through the wrapper, want 0 (one transfer call)", n)
			}
			if n := tm.countSpans("lease transfer"); n != 1 {
				t.Errorf("%d transfer spans, want 1", n)
			}
			r, err := b.AcquireLease(ctx, key, "b", time.Minute) // b's own tenure: its token
			if err != nil || !r.Acquired {
				t.Fatalf("AcquireLease by the new owner: %+v, %v", r, err)
			}
			if h2.Token() != r.Token || h2.Token() <= h.Token() {
				t.Errorf("new Held's token %d, the backend's for b %d, the old %d", h2.Token(), r.Token, h.Token())
			}
			// Refused: a from-owner that holds nothing.
			tok, err := w.(lease.TokenTransferer).TransferLeaseToken(ctx, key, "nobody", "c", time.Minute)
			if tok != 0 || err != nil {
				t.Errorf("transfer from a non-holder: %d, %v; want 0, nil", tok, err)
			}
			if _, err := w.(lease.TokenTransferer).TransferLeaseToken(ctx, "", "b", "c", time.Minute); !errors.Is(err, lease.ErrInvalid) {
				t.Errorf("transfer of an empty key: %v, want ErrInvalid", err)
			}
		})
	}
}
