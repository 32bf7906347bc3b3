package lease

import (
	"context"
	"time"
)

// Noop is the always-win Provider used when a backend cannot lease: every
// acquire wins (Owner is the caller, Token 0, TTL the requested ttl),
// GetLeaseOwner returns "", release does nothing, and renew and transfer
// report true. It validates its input like any provider. It gives no mutual
// exclusion across processes, which is why runtimes that fall back to it say
// so in their logs.
var Noop Provider = noop{}

type noop struct{}

func (noop) AcquireLease(_ context.Context, key, owner string, ttl time.Duration) (Result, error) {
	if err := CheckAcquire(key, owner, ttl); err != nil {
		return Result{}, err
	}
	return Result{Acquired: true, Owner: owner, TTL: ttl}, nil
}

func (noop) GetLeaseOwner(_ context.Context, key string) (string, error) {
	return "", CheckKey(key)
}

func (noop) ReleaseLease(_ context.Context, key, owner string) error {
	return CheckRelease(key, owner)
}

func (noop) RenewLease(_ context.Context, key, owner string, ttl time.Duration) (bool, error) {
	if err := CheckAcquire(key, owner, ttl); err != nil {
		return false, err
	}
	return true, nil
}

func (noop) TransferLease(_ context.Context, key, from, to string, ttl time.Duration) (bool, error) {
	if err := CheckTransfer(key, from, to, ttl); err != nil {
		return false, err
	}
	return true, nil
}
