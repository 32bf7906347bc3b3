package lease

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"time"
)

var (
	// ErrHeld is matched (errors.Is) by a *HeldError: the lease is held by
	// another owner.
	ErrHeld = errors.New("lease: held by another owner")

	// ErrNotHeld is returned when an operation needs the caller to hold a
	// lease it does not (or no longer) hold.
	ErrNotHeld = errors.New("lease: not held")

	// ErrInvalid is wrapped by every error about bad input; the message names
	// the field and the value. Compare with errors.Is.
	ErrInvalid = errors.New("lease: invalid argument")

	// ErrClosed is returned by every lease call made after the backend (or
	// Keeper) closed.
	ErrClosed = errors.New("lease: closed")

	// ErrRevoked is matched (errors.Is) by the error a backend returns when
	// the lease a call refers to was revoked by an operator (see the
	// optional revoke capability). A Held whose renewal returns it ends at
	// once with that error as its cause.
	ErrRevoked = errors.New("lease: revoked")

	// ErrNotSent is matched (errors.Is) by the error of a call the provider
	// never sent to its store: it did not run, so it changed nothing (a
	// call whose ctx ended before it was sent, or that was queued behind a
	// call that failed). Providers need not use it; an error without it
	// says nothing either way. The signals runtime uses it to tell an
	// acquire that cannot have taken a lease from one that may have.
	ErrNotSent = errors.New("lease: call not sent")
)

// Result is the outcome of AcquireLease.
type Result struct {
	// Acquired reports whether the caller holds the lease now.
	Acquired bool
	// Owner is the caller when Acquired; otherwise the current holder ("" only
	// when no holder could be read).
	Owner string
	// Token is the fencing token of the holder's tenure (0 where a backend
	// has none, such as Noop).
	Token uint64
	// TTL is the time left on the lease, as the backend's clock sees it.
	TTL time.Duration
}

// Provider is the lease capability of a backend. Implementations are safe for
// concurrent use. Every method returns an error wrapping ErrInvalid for bad
// input, ErrClosed after the backend closed, and a transport error when the
// backend could not be reached; never a silent false.
type Provider interface {
	// AcquireLease tries to take key for owner for ttl. It wins when the key
	// is free or expired (a new tenure with a new, higher token) or already
	// held by owner (TTL refreshed, same token). When another owner holds
	// it, it returns Acquired false with that owner, its token and TTL, and a
	// nil error.
	AcquireLease(ctx context.Context, key, owner string, ttl time.Duration) (Result, error)
	// GetLeaseOwner returns the holder of key, or "" when no live lease
	// exists.
	GetLeaseOwner(ctx context.Context, key string) (string, error)
	// ReleaseLease deletes the lease when owner holds it; otherwise it does
	// nothing and returns nil. The check and the delete are one atomic step.
	ReleaseLease(ctx context.Context, key, owner string) error
	// RenewLease extends owner's live lease on key to ttl from now and
	// reports true, or reports false when owner does not hold a live lease
	// (it never re-creates an expired lease).
	RenewLease(ctx context.Context, key, owner string, ttl time.Duration) (bool, error)
	// TransferLease hands key from fromOwner to toOwner in one atomic step,
	// with a new token and a full ttl, and reports true; it reports false
	// when fromOwner no longer holds the lease. The key is never free in
	// between. After a transport error (a call that may have been sent: not
	// ErrNotSent) the transfer may still run at any later time, after later
	// calls of fromOwner succeeded too (a request the network delivers
	// late): fromOwner must then treat the lease as lost, as Held.Transfer
	// does.
	TransferLease(ctx context.Context, key, fromOwner, toOwner string, ttl time.Duration) (bool, error)
}

// Info describes one live lease, as an Inspector reports it.
type Info struct {
	Key   string
	Owner string
	Token uint64
	TTL   time.Duration
}

// Inspector is an optional capability of a Provider, for operators: read a
// lease's holder, token and time left, and list live leases. Find it with a
// type assertion.
type Inspector interface {
	// InspectLease returns the live lease on key; a zero Info (with Key set)
	// with nil error when there is none.
	InspectLease(ctx context.Context, key string) (Info, error)
	// ListLeases returns every live lease whose key starts with prefix
	// ("" lists all), in no particular order.
	ListLeases(ctx context.Context, prefix string) ([]Info, error)
}

// TokenTransferer is an optional capability of a Provider: a transfer that
// also reports the fencing token it gave the new owner. [Held.Transfer]
// uses it when the provider has it; otherwise it reads the token back with
// an AcquireLease by the new owner, one more call per hand-off.
//
// Keep uses it instead of TransferLease, found by a type assertion: a
// wrapper that embeds a provider and overrides TransferLease (to refuse,
// count or trace transfers) must override TransferLeaseToken the same way,
// or hide it by not embedding the provider, else [Held.Transfer] goes
// around the override. The same holds for [BatchRenewer] and RenewLease.
type TokenTransferer interface {
	// TransferLeaseToken is TransferLease that returns the new owner's
	// fencing token: above 0 when the transfer happened (the token an
	// AcquireLease by toOwner would report now), 0 with nil error when it
	// was refused because fromOwner holds no live lease on key. Errors,
	// and what a call run twice does, as for TransferLease.
	TransferLeaseToken(ctx context.Context, key, fromOwner, toOwner string, ttl time.Duration) (uint64, error)
}

// TokenReleaser is an optional capability of a Provider: a release that
// deletes the lease only when owner holds it in the tenure of token (the
// fencing token its acquire or transfer reported), so that a release the
// network delivers late never deletes a later tenure of the same owner.
// [Held.Release] uses it when the provider has it (found by a type
// assertion: a wrapper that overrides ReleaseLease must override it too).
type TokenReleaser interface {
	// ReleaseLeaseToken is ReleaseLease restricted to the tenure of token:
	// when owner holds key in another tenure, or does not hold it, it does
	// nothing and returns nil. A token of 0 is bad input (ErrInvalid).
	ReleaseLeaseToken(ctx context.Context, key, owner string, token uint64) error
}

// Renewal is one request of a batch renewal.
type Renewal struct {
	Key   string
	Owner string
	TTL   time.Duration
}

// BatchRenewer is an optional capability of a Provider: renew many leases in
// one round trip. Keep uses it when the provider has it, so a process that
// holds thousands of leases does not spend a round trip per lease per
// heartbeat.
type BatchRenewer interface {
	// RenewLeases renews each request as RenewLease would and returns one
	// result per request, in order. An error means no result is known (the
	// whole batch should be treated as not renewed), except a *BatchError
	// returned with a full-length result: then only the requests whose entry
	// in BatchError.Errs is non-nil have no known result, and the others'
	// results hold (so one unreachable shard fails only its own leases). A
	// bad request makes the whole call fail with an error wrapping
	// ErrInvalid.
	RenewLeases(ctx context.Context, reqs []Renewal) ([]bool, error)
}

// BatchError is the error of a batch call some of whose requests failed
// while the others got a result: Errs has one entry per request, in order,
// nil where the request's result is known. errors.Is and errors.As see
// every non-nil entry.
type BatchError struct {
	Errs []error
}

// Error reports how many requests failed and the first failure.
func (e *BatchError) Error() string {
	n, first := 0, error(nil)
	for _, err := range e.Errs {
		if err != nil {
			if first == nil {
				first = err
			}
			n++
		}
	}
	return fmt.Sprintf("lease: %d of %d requests failed: %v", n, len(e.Errs), first)
}

// Unwrap returns the non-nil entries of Errs.
func (e *BatchError) Unwrap() []error {
	var errs []error
	for _, err := range e.Errs {
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// ProviderOf returns backend as a Provider when it implements all five lease
// methods, and (Noop, false) otherwise: a value with four of the five methods
// is not a provider.
func ProviderOf(backend any) (Provider, bool) {
	if p, ok := backend.(Provider); ok && p != nil {
		return p, true
	}
	return Noop, false
}

// HeldError reports that a lease is held by another owner. It matches ErrHeld
// with errors.Is.
type HeldError struct {
	Key   string
	Owner string        // the holder; "" when it could not be read
	Token uint64        // the holder's fencing token
	TTL   time.Duration // time left on the holder's lease
}

// Error returns a message such as
// `lease "output.json" held by worker-2, expires in 28s`.
func (e *HeldError) Error() string {
	owner := e.Owner
	if owner == "" {
		owner = "an unknown owner"
	}
	return fmt.Sprintf("lease %q held by %s, expires in %v", e.Key, owner, roundTTL(e.TTL))
}

// Is reports whether target is ErrHeld.
func (e *HeldError) Is(target error) bool { return target == ErrHeld }

func roundTTL(d time.Duration) time.Duration {
	switch {
	case d >= 10*time.Second:
		return d.Round(time.Second)
	case d >= time.Second:
		return d.Round(100 * time.Millisecond)
	default:
		return d.Round(time.Millisecond)
	}
}

// NewHeldError returns the *HeldError that describes a lost acquire of key.
func NewHeldError(key string, r Result) *HeldError {
	return &HeldError{Key: key, Owner: r.Owner, Token: r.Token, TTL: r.TTL}
}

// CheckKey returns an error wrapping ErrInvalid when key is empty.
func CheckKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: lease key is empty", ErrInvalid)
	}
	return nil
}

// CheckOwner returns an error wrapping ErrInvalid when owner is empty; field
// names the parameter in the message ("owner", "fromOwner", "toOwner").
func CheckOwner(field, owner string) error {
	if owner == "" {
		return fmt.Errorf("%w: %s is empty", ErrInvalid, field)
	}
	return nil
}

// CheckTTL returns an error wrapping ErrInvalid when ttl is not positive, or
// below a millisecond (backends count in milliseconds).
func CheckTTL(ttl time.Duration) error {
	if ttl < time.Millisecond {
		return fmt.Errorf("%w: ttl %v is below 1ms", ErrInvalid, ttl)
	}
	return nil
}

// CheckAcquire validates the arguments of AcquireLease and RenewLease.
// Backends call it so that every backend rejects the same input the same way.
func CheckAcquire(key, owner string, ttl time.Duration) error {
	if err := CheckKey(key); err != nil {
		return err
	}
	if err := CheckOwner("owner", owner); err != nil {
		return fmt.Errorf("%w (key %q)", err, key)
	}
	if err := CheckTTL(ttl); err != nil {
		return fmt.Errorf("%w (key %q)", err, key)
	}
	return nil
}

// CheckRelease validates the arguments of ReleaseLease.
func CheckRelease(key, owner string) error {
	if err := CheckKey(key); err != nil {
		return err
	}
	if err := CheckOwner("owner", owner); err != nil {
		return fmt.Errorf("%w (key %q)", err, key)
	}
	return nil
}

// CheckTransfer validates the arguments of TransferLease.
func CheckTransfer(key, from, to string, ttl time.Duration) error {
	if err := CheckKey(key); err != nil {
		return err
	}
	if err := CheckOwner("fromOwner", from); err != nil {
		return fmt.Errorf("%w (key %q)", err, key)
	}
	if err := CheckOwner("toOwner", to); err != nil {
		return fmt.Errorf("%w (key %q)", err, key)
	}
	if from == to {
		return fmt.Errorf("%w: fromOwner and toOwner are both %q (key %q)", ErrInvalid, from, key)
	}
	if err := CheckTTL(ttl); err != nil {
		return fmt.Errorf("%w (key %q)", err, key)
	}
	return nil
}

// CheckRenewals validates a batch for BatchRenewer.RenewLeases.
func CheckRenewals(reqs []Renewal) error {
	for i, r := range reqs {
		if err := CheckAcquire(r.Key, r.Owner, r.TTL); err != nil {
			return fmt.Errorf("renewal %d: %w", i, err)
		}
	}
	return nil
}

// checkProvider returns an error wrapping ErrInvalid when p is nil, also a
// nil pointer or func of a type that implements Provider, whose methods
// would panic. (A nil map or slice of such a type is a usable value.)
func checkProvider(p Provider) error {
	if p == nil {
		return fmt.Errorf("%w: provider is nil", ErrInvalid)
	}
	switch v := reflect.ValueOf(p); v.Kind() {
	case reflect.Pointer, reflect.Func:
		if v.IsNil() {
			return fmt.Errorf("%w: provider is a nil %T", ErrInvalid, p)
		}
	}
	return nil
}
