package lease

import (
	"context"
	"fmt"
	"time"
)

// Status is what became of a lease, as [Revoker.LeaseState] reports it.
type Status string

// The statuses of a lease.
const (
	// StatusNone: nothing is known of the key: it was never held, or its
	// last lease ended more than StatusWindow ago.
	StatusNone Status = ""
	// StatusActive: a live lease that was not revoked.
	StatusActive Status = "active"
	// StatusRevoked: the lease was revoked. It stays revoked while the
	// holder still holds it (a revoke that was not forced leaves the key
	// held until the holder releases it or it expires) and for StatusWindow
	// after it ended.
	StatusRevoked Status = "revoked"
	// StatusReleased: the holder released the lease within StatusWindow.
	StatusReleased Status = "released"
	// StatusExpired: the lease ran out without a release (its holder died
	// or stopped renewing) within StatusWindow.
	StatusExpired Status = "expired"
)

// StatusWindow is how long the backends of this module (inmem,
// redisstreams) keep the status of a lease after it ended: a
// [Revoker.LeaseState] within that window reports released or revoked (for
// a lease released, revoked, or revoked and then expired), or expired, and
// StatusNone after it. It is counted from the end of the lease (its release,
// its forced revoke, or the moment it expired). One exception: redisstreams
// does not write on renewals, so a lease it renewed for longer than
// StatusWindow and that then expired reads as StatusNone, not expired.
const StatusWindow = 10 * time.Minute

// State describes a lease key as [Revoker.LeaseState] reports it.
type State struct {
	Key    string
	Status Status
	// Owner is the holder of a live lease, or the last holder of one that
	// ended ("" with StatusNone).
	Owner string
	// Token is the fencing token of that tenure.
	Token uint64
	// TTL is the time left on a live lease (active, or revoked and still
	// held); 0 when the key is free.
	TTL time.Duration
	// Reason is the revoke reason (StatusRevoked only).
	Reason string
	// Forced reports a forced revoke (StatusRevoked only).
	Forced bool
}

// Live reports whether the key is held: an active lease, or a revoked one
// whose holder has not released it and which has not expired.
func (s State) Live() bool { return s.TTL > 0 }

// Revoker is an optional capability of a Provider, for operators: take a
// lease away from its holder and read what became of a lease. Find it with
// a type assertion, as Inspector.
//
// A revoke applies to the tenure holding the key when it runs on the
// backend: a revoke call that failed (its ctx ended, a request the network
// delivers late) may still run later, on the tenure that holds the key then
// (review h70 saw a forced revoke made against a dead holder's tenure free
// the next, live, holder's). The optional [TokenRevoker] names the tenure
// instead (TestLateForceRevokeTokenSparesNextTenure in redisstreams). From then
// on the holder's RenewLease fails with a *RevokedError (errors.Is
// ErrRevoked) carrying the reason, and so do its AcquireLease (the refresh
// of a lease it holds) and TransferLease; a Held whose renewal fails so ends
// at once. Its ReleaseLease still releases. The revoke never hands the key
// to anybody: after [Revoker.RevokeLease] the key stays held by the revoked
// holder, and other owners' acquires lose to it, until the holder releases
// it or it expires. So a revoke never creates two holders, as long as the
// holder stops its work when its renewal fails (which lease.Keep makes sure
// of: the Held's Context is cancelled). [Revoker.ForceRevokeLease] frees
// the key at once instead.
//
// A later call of the revoked holder never touches a new holder: once
// another owner holds the key, the revoked holder's renew and transfer
// report false (or the *RevokedError) and its release does nothing.
type Revoker interface {
	// RevokeLease marks the live lease on key revoked, for reason. It
	// returns nil when the lease was revoked by this call or had been
	// already (the first reason stays), and an error wrapping ErrNotHeld
	// when key has no live lease. The key stays held until its holder
	// releases it or it expires. Bad input (empty key or reason) returns an
	// error wrapping ErrInvalid; after Close, ErrClosed.
	RevokeLease(ctx context.Context, key, reason string) error
	// ForceRevokeLease is RevokeLease that also frees the key at once: the
	// next acquire by anybody wins, with a higher fencing token. The revoked
	// holder learns of it at its next renewal, so until then two processes
	// may both act as holders: use it only when the resource the lease
	// guards checks fencing tokens, or when the holder is known to be dead.
	// It also applies to a lease already revoked (freeing it).
	ForceRevokeLease(ctx context.Context, key, reason string) error
	// LeaseState returns the state of key: the live lease, or the status of
	// the last one within StatusWindow after it ended. Bad input returns an
	// error wrapping ErrInvalid; after Close, ErrClosed.
	LeaseState(ctx context.Context, key string) (State, error)
}

// TokenRevoker is an optional capability of a [Revoker]: a revoke that
// applies only to the tenure of a given fencing token (as [Revoker.LeaseState]
// or [Inspector] reported it), so that a revoke that runs after the lease
// changed hands (the network delivered it late, or the holder died and
// another owner took the key between the operator's read and the revoke)
// leaves the later tenure alone. Find it with a type assertion; a wrapper
// that overrides RevokeLease or ForceRevokeLease must override these too.
// `leasebus leases revoke` uses it.
type TokenRevoker interface {
	// RevokeLeaseToken is RevokeLease restricted to the tenure of token: it
	// returns an error wrapping ErrNotHeld when key has no live lease in
	// that tenure (free, or held in another tenure, by any owner). A token
	// of 0 is bad input (ErrInvalid).
	RevokeLeaseToken(ctx context.Context, key, reason string, token uint64) error
	// ForceRevokeLeaseToken is ForceRevokeLease restricted to the tenure of
	// token, as RevokeLeaseToken.
	ForceRevokeLeaseToken(ctx context.Context, key, reason string, token uint64) error
}

// RevokedError reports that a lease was revoked. It matches ErrRevoked with
// errors.Is.
type RevokedError struct {
	Key    string
	Owner  string // the revoked holder
	Reason string // the operator's reason
}

// Error returns a message such as
// `lease "jobs/42" of worker-2 revoked: stuck since 03:00`.
func (e *RevokedError) Error() string {
	return fmt.Sprintf("lease %q of %s revoked: %s", e.Key, e.Owner, e.Reason)
}

// Is reports whether target is ErrRevoked.
func (e *RevokedError) Is(target error) bool { return target == ErrRevoked }

// CheckRevoke validates the arguments of RevokeLease and ForceRevokeLease.
func CheckRevoke(key, reason string) error {
	if err := CheckKey(key); err != nil {
		return err
	}
	if reason == "" {
		return fmt.Errorf("%w: revoke reason is empty (key %q)", ErrInvalid, key)
	}
	return nil
}

// CheckRevokeToken validates the arguments of RevokeLeaseToken and
// ForceRevokeLeaseToken: those of CheckRevoke, and a token above 0.
func CheckRevokeToken(key, reason string, token uint64) error {
	if err := CheckRevoke(key, reason); err != nil {
		return err
	}
	if token == 0 {
		return fmt.Errorf("%w: token is 0 (key %q)", ErrInvalid, key)
	}
	return nil
}

// NoLiveLeaseError returns the error RevokeLease returns when key has no
// live lease: it wraps ErrNotHeld.
func NoLiveLeaseError(key string) error {
	return fmt.Errorf("%w: lease %q has no live lease to revoke", ErrNotHeld, key)
}

// NoLiveTenureError returns the error RevokeLeaseToken returns when key has
// no live lease in the tenure of token: it wraps ErrNotHeld.
func NoLiveTenureError(key string, token uint64) error {
	return fmt.Errorf("%w: lease %q has no live tenure with token %d to revoke (free, or held in another tenure)", ErrNotHeld, key, token)
}
