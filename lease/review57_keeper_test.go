package lease_test

import (
	"context"
	"errors"
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
