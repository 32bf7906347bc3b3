package lease_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leasebus/leasebus/lease"
)

// TestReview57NewKeeperNilProviderIsErrInvalid: Keeper.Keep "returns an
// error wrapping ErrInvalid for bad input" (lease/keep.go) and the package
// function Keep rejects a nil provider so; a Keeper made by NewKeeper with
// a nil provider panics with a nil pointer dereference in Keep instead.
func TestReview57NewKeeperNilProviderIsErrInvalid(t *testing.T) {
	k := lease.NewKeeper(nil, lease.KeeperOptions{})
	defer k.Close()
	var err error
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("Keep on NewKeeper(nil, ...) panicked: %v", r)
			}
		}()
		_, err = k.Keep(context.Background(), "k", "o", time.Second)
	}()
	if !errors.Is(err, lease.ErrInvalid) {
		t.Fatalf("Keep on NewKeeper(nil, ...) = %v, want an error wrapping ErrInvalid", err)
	}
}

// nilProvider is a Provider whose methods read its fields: a nil one
// panics in any of them.
type nilProvider struct{ lease.Provider }

// TestTypedNilProviderIsErrInvalid: Keep, Keeper.Keep and Wait reject a
// provider that is a nil pointer of a type implementing Provider (review
// h57 noticed lease.Keep panicked), naming its type.
func TestTypedNilProviderIsErrInvalid(t *testing.T) {
	var p *nilProvider
	ctx := context.Background()
	check := func(what string, call func() error) {
		t.Helper()
		var err error
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("%s with a nil *nilProvider panicked: %v", what, r)
				}
			}()
			err = call()
		}()
		if !errors.Is(err, lease.ErrInvalid) || !strings.Contains(err.Error(), "nilProvider") {
			t.Fatalf("%s with a nil *nilProvider = %v, want ErrInvalid naming the type", what, err)
		}
	}
	check("Keep", func() error { _, err := lease.Keep(ctx, p, "k", "o", time.Second); return err })
	k := lease.NewKeeper(p, lease.KeeperOptions{})
	defer k.Close()
	check("Keeper.Keep", func() error { _, err := k.Keep(ctx, "k", "o", time.Second); return err })
	check("Wait", func() error { _, err := lease.Wait(ctx, p, "k", "o", time.Second, lease.Backoff{}); return err })
}
