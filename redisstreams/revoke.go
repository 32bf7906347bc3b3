package redisstreams

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/lease"
)

// Revocation and lease status. Each lease key k has two more keys in its
// slot (see lua/revoke.lua): a state record, b.keys.LeaseState(k), a hash
// with the holder and token of the latest tenure (written by acquire of a
// free key and by transfer, with the lease's ttl plus lease.StatusWindow)
// and, once it was revoked or released, that status, the reason and whether
// the revoke was forced (then it expires lease.StatusWindow after the lease
// ended); and a revoked mark, b.keys.LeaseRevoked(k), holding the revoked
// owner, which exists only from a revoke until the next tenure. Each revoke
// call that finds the lease revoked also leaves a mark of its own,
// b.keys.LeaseRevokeCall(k, nonce), until a status window after the end the
// lease had then, so that the same call run again is told it ran. Renewals
// read only the revoked mark (renew_many.lua with one MGET for the batch)
// and write neither: renew, refresh and transfer of a revoked tenure answer
// {reason} instead of touching the lease.
//
// So a lease renewed for longer than lease.StatusWindow outlives its state
// record: if it then expires, LeaseState reports lease.StatusNone rather
// than lease.StatusExpired. Released and revoked leases are reported for
// lease.StatusWindow after they ended.

var (
	//go:embed lua/revoke.lua
	revokeLua    string
	revokeScript = newLuaScript(revokeLua)

	//go:embed lua/state.lua
	stateLua    string
	stateScript = newLuaScript(stateLua)
)

var _ lease.Revoker = (*Backend)(nil)

// statusWindowMillis is Options.LeaseStatusWindow in milliseconds, the
// ARGV of the scripts that keep a lease's state record.
func (b *Backend) statusWindowMillis() int64 { return ttlMillis(b.opts.LeaseStatusWindow) }

// revokeKeys returns the KEYS of revoke.lua and state.lua for key.
func (b *Backend) revokeKeys(key string) []string {
	return []string{b.keys.Lease(key), b.keys.Fence(key), b.keys.LeaseState(key), b.keys.LeaseRevoked(key)}
}

// revokeCallKeys returns the keys of revoke.lua for one call of nonce:
// revokeKeys and the call's own mark.
func (b *Backend) revokeCallKeys(key, nonce string) []string {
	return append(b.revokeKeys(key), b.keys.LeaseRevokeCall(key, nonce))
}

// revokedReply reports whether reply is a lease script's answer for a
// revoked tenure, {reason}, and returns the reason.
func revokedReply(reply any) (string, bool) {
	v, ok := reply.([]any)
	if !ok || len(v) != 1 {
		return "", false
	}
	switch r := v[0].(type) {
	case string:
		return r, true
	case nil:
		return "", true
	}
	return "", false
}

// RevokeLease marks the live lease on key revoked, in one script
// (lease.Revoker): from then on the holder's RenewLease, AcquireLease (its
// refresh) and TransferLease return a *lease.RevokedError carrying reason,
// its ReleaseLease still releases, and the key stays held by it until it
// releases it or the lease expires, so that no other owner can acquire it
// while the holder may still be working. It returns nil when the lease is
// revoked (by this call or earlier; the first reason stays), an error
// wrapping lease.ErrNotHeld when key has no live lease, an error wrapping
// lease.ErrInvalid for an empty key or reason, and lease.ErrClosed after
// Close.
func (b *Backend) RevokeLease(ctx context.Context, key, reason string) error {
	return b.revoke(ctx, key, reason, false, 0)
}

// ForceRevokeLease is RevokeLease that also deletes the lease key at once,
// so that the next acquire by anybody wins with a higher fencing token (see
// lease.Revoker for when that is safe).
func (b *Backend) ForceRevokeLease(ctx context.Context, key, reason string) error {
	return b.revoke(ctx, key, reason, true, 0)
}

// RevokeLeaseToken is RevokeLease restricted to the tenure of token
// (lease.TokenRevoker): revoke.lua compares token with the key's fencing
// counter, whose value is the live tenure's token, so a call that runs after
// the lease changed hands (delivered late by the network, or after the
// holder's lease expired and another owner won the key) touches nothing and
// reports lease.ErrNotHeld (TestLateForceRevokeTokenSparesNextTenure). A
// token of 0 is bad input.
func (b *Backend) RevokeLeaseToken(ctx context.Context, key, reason string, token uint64) error {
	if err := lease.CheckRevokeToken(key, reason, token); err != nil {
		return err
	}
	return b.revoke(ctx, key, reason, false, token)
}

// ForceRevokeLeaseToken is ForceRevokeLease restricted to the tenure of
// token, as RevokeLeaseToken.
func (b *Backend) ForceRevokeLeaseToken(ctx context.Context, key, reason string, token uint64) error {
	if err := lease.CheckRevokeToken(key, reason, token); err != nil {
		return err
	}
	return b.revoke(ctx, key, reason, true, token)
}

// revoke runs revoke.lua; token is 0 to revoke whatever tenure holds key.
func (b *Backend) revoke(ctx context.Context, key, reason string, forced bool, token uint64) error {
	if err := lease.CheckRevoke(key, reason); err != nil {
		return err
	}
	tok := ""
	if token > 0 {
		tok = strconv.FormatUint(token, 10)
	}
	if b.isClosed() {
		return lease.ErrClosed
	}
	force := "0"
	if forced {
		force = "1"
	}
	// The call's mark, named by its nonce, tells a second run of this call
	// (go-redis's retry after a lost reply, or runLeaseMigrating's) that it
	// ran: a revoke run twice would find no lease, or revoke the next
	// tenure (TestForceRevokeRetriedAfterLostReply,
	// TestForceRevokeNotRunAgainAfterLostReplyDuringSlotMove,
	// TestRevokeRetryAfterAnotherRevokeCall).
	n, err := b.runLeaseMigrating(ctx, newCall(ctx, revokeScript,
		b.revokeCallKeys(key, strconv.FormatUint(rand.Uint64(), 36)), reason, force, b.statusWindowMillis(), tok)).Int64()
	if err != nil {
		return b.leaseErr("revoke", key, err)
	}
	if n == 0 {
		if token > 0 {
			return lease.NoLiveTenureError(key, token)
		}
		return lease.NoLiveLeaseError(key)
	}
	return nil
}

// LeaseState returns the state of key, read atomically by one script
// (lease.Revoker): the live lease (active, or revoked and not yet released),
// or, within Options.LeaseStatusWindow after the last lease ended, whether it was
// released, revoked or expired. Bad input returns an error wrapping
// lease.ErrInvalid; after Close, lease.ErrClosed.
func (b *Backend) LeaseState(ctx context.Context, key string) (lease.State, error) {
	if err := lease.CheckKey(key); err != nil {
		return lease.State{}, err
	}
	if b.isClosed() {
		return lease.State{}, lease.ErrClosed
	}
	vals, err := b.runLeaseMigrating(ctx, newCall(ctx, stateScript,
		b.revokeKeys(key))).Slice()
	switch {
	case errors.Is(err, redis.Nil):
		return lease.State{Key: key}, nil
	case err != nil:
		return lease.State{}, b.leaseErr("read the state of", key, err)
	}
	if len(vals) != 6 {
		return lease.State{}, b.leaseErr("read the state of", key, fmt.Errorf("unexpected reply %v", vals))
	}
	status, ok1 := vals[0].(string)
	owner, ok2 := vals[1].(string)
	tok, ok3 := vals[2].(int64)
	ms, ok4 := vals[3].(int64)
	reason, ok5 := vals[4].(string)
	forced, ok6 := vals[5].(string)
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || !ok6 {
		return lease.State{}, b.leaseErr("read the state of", key, fmt.Errorf("unexpected reply %v", vals))
	}
	return lease.State{Key: key, Status: lease.Status(status), Owner: owner, Token: uint64(tok), TTL: pttl(ms),
		Reason: reason, Forced: forced == "1"}, nil
}
