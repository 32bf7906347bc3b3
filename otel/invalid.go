package leasebusotel

import (
	"context"
	"fmt"
	"time"

	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/pubsub"
)

// errNil returns the error of a call on the wrapper of a nil value.
func errNil(what string) error {
	return fmt.Errorf("%w: %s is nil", ErrInvalid, what)
}

// invalidBus is what Wrap returns for a nil backend: every call returns an
// error wrapping ErrInvalid, instead of a nil pointer panic later.
type invalidBus struct{}

func (invalidBus) Publish(context.Context, string, pubsub.Event) error { return errNil("backend") }
func (invalidBus) Subscribe(context.Context, string, pubsub.Handler, ...pubsub.SubscribeOption) (pubsub.Subscription, error) {
	return nil, errNil("backend")
}
func (invalidBus) Flush(context.Context) error { return errNil("backend") }
func (invalidBus) Close() error                { return errNil("backend") }

// invalidProvider is what WrapProvider returns for a nil provider.
type invalidProvider struct{}

func (invalidProvider) AcquireLease(context.Context, string, string, time.Duration) (lease.Result, error) {
	return lease.Result{}, errNil("lease provider")
}
func (invalidProvider) GetLeaseOwner(context.Context, string) (string, error) {
	return "", errNil("lease provider")
}
func (invalidProvider) ReleaseLease(context.Context, string, string) error {
	return errNil("lease provider")
}
func (invalidProvider) RenewLease(context.Context, string, string, time.Duration) (bool, error) {
	return false, errNil("lease provider")
}
func (invalidProvider) TransferLease(context.Context, string, string, string, time.Duration) (bool, error) {
	return false, errNil("lease provider")
}
