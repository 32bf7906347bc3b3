package lease_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leasebus/leasebus/inmem"
	"github.com/leasebus/leasebus/lease"
)

// fourOfFive has every lease method but TransferLease.
type fourOfFive struct{}

func (fourOfFive) AcquireLease(context.Context, string, string, time.Duration) (lease.Result, error) {
	return lease.Result{}, nil
}
func (fourOfFive) GetLeaseOwner(context.Context, string) (string, error) { return "", nil }
func (fourOfFive) ReleaseLease(context.Context, string, string) error    { return nil }
func (fourOfFive) RenewLease(context.Context, string, string, time.Duration) (bool, error) {
	return false, nil
}

func TestLeaseProviderOf(t *testing.T) {
	b := inmem.New()
	defer b.Close()
	if p, ok := lease.ProviderOf(b); !ok || p != lease.Provider(b) {
		t.Fatalf("ProviderOf(inmem) = %v, %v; want the backend itself, true", p, ok)
	}
	for _, v := range []any{fourOfFive{}, nil, struct{}{}} {
		if p, ok := lease.ProviderOf(v); ok || p != lease.Noop {
			t.Fatalf("ProviderOf(%T) = %v, %v; want Noop, false", v, p, ok)
		}
	}
}

func TestLeaseNoop(t *testing.T) {
	ctx := t.Context()
	p := lease.Noop
	r, err := p.AcquireLease(ctx, "k", "a", time.Second)
	if err != nil || r != (lease.Result{Acquired: true, Owner: "a", TTL: time.Second}) {
		t.Fatalf("AcquireLease = %+v, %v; want won by a, token 0, TTL 1s", r, err)
	}
	if r, err := p.AcquireLease(ctx, "k", "b", time.Second); err != nil || !r.Acquired || r.Owner != "b" {
		t.Fatalf("second AcquireLease = %+v, %v; want always-win", r, err)
	}
	if o, err := p.GetLeaseOwner(ctx, "k"); o != "" || err != nil {
		t.Fatalf("GetLeaseOwner = %q, %v; want \"\", nil", o, err)
	}
	if ok, err := p.RenewLease(ctx, "k", "z", time.Second); !ok || err != nil {
		t.Fatalf("RenewLease = %v, %v; want true, nil", ok, err)
	}
	if ok, err := p.TransferLease(ctx, "k", "a", "b", time.Second); !ok || err != nil {
		t.Fatalf("TransferLease = %v, %v; want true, nil", ok, err)
	}
	if err := p.ReleaseLease(ctx, "k", "a"); err != nil {
		t.Fatalf("ReleaseLease = %v", err)
	}
	for name, err := range map[string]error{
		"empty key":  func() error { _, err := p.AcquireLease(ctx, "", "a", time.Second); return err }(),
		"zero ttl":   func() error { _, err := p.RenewLease(ctx, "k", "a", 0); return err }(),
		"from == to": func() error { _, err := p.TransferLease(ctx, "k", "a", "a", time.Second); return err }(),
		"owner":      p.ReleaseLease(ctx, "k", ""),
	} {
		if !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("%s: error %v, want lease.ErrInvalid", name, err)
		}
	}
}

func TestLeaseHeldError(t *testing.T) {
	err := error(&lease.HeldError{Key: "output.json", Owner: "worker-2", Token: 7, TTL: 28 * time.Second})
	if got, want := err.Error(), `lease "output.json" held by worker-2, expires in 28s`; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
	wrapped := fmt.Errorf("run: %w", err)
	if !errors.Is(wrapped, lease.ErrHeld) {
		t.Fatal("errors.Is(wrapped HeldError, ErrHeld) = false")
	}
	if errors.Is(wrapped, lease.ErrNotHeld) {
		t.Fatal("a HeldError matches ErrNotHeld")
	}
	var he *lease.HeldError
	if !errors.As(wrapped, &he) || he.Owner != "worker-2" || he.Token != 7 {
		t.Fatalf("errors.As = %+v, want the HeldError", he)
	}
	r := lease.Result{Owner: "", TTL: 1500 * time.Millisecond}
	if got := lease.NewHeldError("k", r).Error(); !strings.Contains(got, "an unknown owner") || !strings.Contains(got, "1.5s") {
		t.Fatalf("unknown holder message = %q", got)
	}
}
