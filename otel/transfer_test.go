package leasebusotel_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"

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

// afterTransfer is a lease.Provider without TransferLeaseToken whose
// AcquireLease right after a successful transfer fails (err set) or finds
// the lease taken by another owner (steal set): the two ways the wrapper's
// fallback can fail after the transfer itself succeeded.
type afterTransfer struct {
	lease.Provider
	err   error
	steal string
	moved bool
}

func (p *afterTransfer) TransferLease(ctx context.Context, key, from, to string, ttl time.Duration) (bool, error) {
	ok, err := p.Provider.TransferLease(ctx, key, from, to, ttl)
	if ok && err == nil {
		p.moved = true
		if p.steal != "" {
			// The new owner's lease is lost between the two calls: it is
			// released and another owner takes the key.
			if err := p.Provider.ReleaseLease(ctx, key, to); err != nil {
				return ok, err
			}
			if r, err := p.Provider.AcquireLease(ctx, key, p.steal, ttl); err != nil || !r.Acquired {
				return ok, fmt.Errorf("steal: %+v, %v", r, err)
			}
		}
	}
	return ok, err
}

func (p *afterTransfer) AcquireLease(ctx context.Context, key, owner string, ttl time.Duration) (lease.Result, error) {
	if p.moved && p.err != nil {
		return lease.Result{}, p.err
	}
	return p.Provider.AcquireLease(ctx, key, owner, ttl)
}

// TestWrappedTransferFallbackErrors: on a provider without
// TransferLeaseToken, a transfer that succeeded but whose token read failed
// returns an error that says so and wraps the read's error, and one whose
// lease was lost between the two calls returns an error wrapping
// lease.ErrNotHeld and a lease.HeldError naming the owner that holds it;
// neither returns a token, and both count as errors in the span and the
// transfers metric.
func TestWrappedTransferFallbackErrors(t *testing.T) {
	boom := errors.New("connection reset")
	for name, p := range map[string]*afterTransfer{
		"token read fails":   {err: boom},
		"lost between calls": {steal: "intruder"},
	} {
		t.Run(name, func(t *testing.T) {
			b := inmem.New()
			defer b.Close()
			p.Provider = b
			tm := newTelemetry(t)
			w := tm.in.WrapProvider(p).(lease.TokenTransferer)
			ctx := context.Background()
			if r, err := b.AcquireLease(ctx, "k", "a", time.Minute); err != nil || !r.Acquired {
				t.Fatalf("AcquireLease: %+v, %v", r, err)
			}
			tok, err := w.TransferLeaseToken(ctx, "k", "a", "b", time.Minute)
			if tok != 0 || err == nil {
				t.Fatalf("TransferLeaseToken: %d, %v; want 0 and an error", tok, err)
			}
			t.Logf("error: %v", err)
			if p.err != nil {
				if !errors.Is(err, boom) || errors.Is(err, lease.ErrNotHeld) || !strings.Contains(err.Error(), "reading its token failed") {
					t.Errorf("the token read's failure: %v", err)
				}
				if owner, err := b.GetLeaseOwner(ctx, "k"); err != nil || owner != "b" {
					t.Errorf("after the transfer the lease is held by %q (%v), want b", owner, err)
				}
			} else {
				var he *lease.HeldError
				if !errors.Is(err, lease.ErrNotHeld) || !errors.As(err, &he) || he.Owner != "intruder" {
					t.Errorf("the lease lost between the calls: %v (HeldError %+v)", err, he)
				}
			}
			if s := tm.span(t, "lease transfer"); s.Status.Code != codes.Error {
				t.Errorf("span status %v, want Error", s.Status.Code)
			}
			if n := tm.sum(t, "leasebus.lease.transfers", attribute.String("leasebus.result", "error")); n != 1 {
				t.Errorf("transfers counted as errors: %d, want 1", n)
			}
		})
	}
}
