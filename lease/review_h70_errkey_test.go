package lease_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leasebus/leasebus/lease"
)

// TestReviewH70InvalidTTLNamesKey: lease.ErrInvalid's doc says the message
// names the field and the value; the owner checks also name the key
// (`owner is empty (key "job")`), the ttl checks do not, in the Provider
// calls nor in Keep, so a failure among many keys' calls cannot be traced
// to its key.
func TestReviewH70InvalidTTLNamesKey(t *testing.T) {
	b := newBackend(t)
	ctx := context.Background()
	k := lease.NewKeeper(b, lease.KeeperOptions{})
	t.Cleanup(func() { k.Close() })
	k2 := lease.NewKeeper(b, lease.KeeperOptions{RenewEvery: time.Second})
	t.Cleanup(func() { k2.Close() })
	for what, f := range map[string]func() error{
		"AcquireLease ttl 0": func() error { _, err := b.AcquireLease(ctx, "job-7", "a", 0); return err },
		"RenewLease ttl -1s": func() error { _, err := b.RenewLease(ctx, "job-7", "a", -time.Second); return err },
		"TransferLease ttl 0": func() error {
			_, err := b.TransferLease(ctx, "job-7", "a", "b", 0)
			return err
		},
		"Keep ttl 2ms":               func() error { _, err := k.Keep(ctx, "job-7", "a", 2*time.Millisecond); return err },
		"Keep ttl = RenewEvery (1s)": func() error { _, err := k2.Keep(ctx, "job-7", "a", time.Second); return err },
	} {
		err := f()
		if !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", what, err)
			continue
		}
		if !strings.Contains(err.Error(), "job-7") {
			t.Errorf("%s: %q does not name the key", what, err)
		}
	}
}
