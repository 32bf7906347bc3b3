package inmem

import (
	"context"
	"time"

	"github.com/leasebus/leasebus/lease"
)

var _ lease.Revoker = (*Backend)(nil)

// leaseMark is what the table remembers of a key's latest tenure beyond the
// live lease: who held it, until when, and whether it was revoked or
// released. It outlives the lease by lease.StatusWindow, so that LeaseState
// can report how the lease ended.
type leaseMark struct {
	owner  string
	token  uint64
	until  time.Time // the lease's expiry while live; when it ended once released or force-revoked
	status lease.Status
	reason string
	forced bool
}

// markTenureLocked records a new tenure of key (acquire of a free key,
// transfer), forgetting the previous one.
func (t *leaseTable) markTenureLocked(key string, e leaseEntry, now time.Time) {
	if t.marks == nil {
		t.marks = make(map[string]*leaseMark)
	}
	t.sweepMarksLocked(now)
	t.marks[key] = &leaseMark{owner: e.owner, token: e.token, until: e.expires}
	t.marksPeak = max(t.marksPeak, len(t.marks))
}

// markExtendLocked records that the live lease e of key was refreshed.
func (t *leaseTable) markExtendLocked(key string, e leaseEntry) {
	if m := t.marks[key]; m != nil && m.owner == e.owner && m.token == e.token {
		m.until = e.expires
	}
}

// markReleaseLocked records the release of key's lease at now.
func (t *leaseTable) markReleaseLocked(key string, now time.Time) {
	if m := t.marks[key]; m != nil {
		m.until = now
		if m.status != lease.StatusRevoked {
			m.status = lease.StatusReleased
		}
	}
}

// revokedLocked returns the *lease.RevokedError of owner on key when the
// table's latest tenure of key is owner's and was revoked, and nil
// otherwise.
func (t *leaseTable) revokedLocked(key, owner string) error {
	if m := t.marks[key]; m != nil && m.owner == owner && m.status == lease.StatusRevoked {
		return &lease.RevokedError{Key: key, Owner: owner, Reason: m.reason}
	}
	return nil
}

// sweepMarksLocked drops, at most once a minute, the marks of leases that
// ended more than lease.StatusWindow ago.
func (t *leaseTable) sweepMarksLocked(now time.Time) {
	if now.Sub(t.marksSwept) < time.Minute {
		return
	}
	t.marksSwept = now
	for key, m := range t.marks {
		if _, live := t.live[key]; !live && now.Sub(m.until) > lease.StatusWindow {
			delete(t.marks, key)
		}
	}
	// Go maps do not shrink: rebuild one that is mostly empty.
	if t.marksPeak >= 1024 && len(t.marks) < t.marksPeak/4 {
		t.marks = shrunk(t.marks)
		t.marksPeak = len(t.marks)
	}
}

// RevokeLease marks the live lease on key revoked (lease.Revoker): the
// holder's renewals, refreshes and transfers fail with a *lease.RevokedError
// from now on, and the key stays held until the holder releases it or it
// expires. It returns nil when the lease is revoked (also when it was
// already), an error wrapping lease.ErrNotHeld when key has no live lease,
// an error wrapping lease.ErrInvalid for an empty key or reason, and
// lease.ErrClosed after Close.
func (b *Backend) RevokeLease(ctx context.Context, key, reason string) error {
	return b.revoke(ctx, key, lease.CheckRevoke(key, reason), reason, false, 0)
}

// ForceRevokeLease is RevokeLease that also frees the key at once (see
// lease.Revoker): the next acquire by anybody wins with a higher token.
func (b *Backend) ForceRevokeLease(ctx context.Context, key, reason string) error {
	return b.revoke(ctx, key, lease.CheckRevoke(key, reason), reason, true, 0)
}

// RevokeLeaseToken is RevokeLease restricted to the tenure of token
// (lease.TokenRevoker): when key is free or held in another tenure it
// touches nothing and returns an error wrapping lease.ErrNotHeld. A token of
// 0 is bad input.
func (b *Backend) RevokeLeaseToken(ctx context.Context, key, reason string, token uint64) error {
	return b.revoke(ctx, key, lease.CheckRevokeToken(key, reason, token), reason, false, token)
}

// ForceRevokeLeaseToken is ForceRevokeLease restricted to the tenure of
// token, as RevokeLeaseToken.
func (b *Backend) ForceRevokeLeaseToken(ctx context.Context, key, reason string, token uint64) error {
	return b.revoke(ctx, key, lease.CheckRevokeToken(key, reason, token), reason, true, token)
}

// revoke revokes the live tenure on key (that of token, unless 0); check is
// the arguments' validation error.
func (b *Backend) revoke(ctx context.Context, key string, check error, reason string, forced bool, token uint64) error {
	if err := b.leaseCall(ctx, check); err != nil {
		return err
	}
	t := &b.leases
	t.mu.Lock()
	defer t.mu.Unlock()
	now := b.clock.Now()
	e, ok := t.getLocked(key, now)
	if ok && token > 0 && e.token != token {
		ok = false
	}
	if !ok {
		if token > 0 {
			return lease.NoLiveTenureError(key, token)
		}
		return lease.NoLiveLeaseError(key)
	}
	m := t.marks[key]
	if m == nil || m.owner != e.owner || m.token != e.token {
		t.markTenureLocked(key, e, now)
		m = t.marks[key]
	}
	if m.status != lease.StatusRevoked {
		m.status, m.reason = lease.StatusRevoked, reason
	}
	if forced {
		m.forced = true
		m.until = now
		delete(t.live, key)
	}
	return nil
}

// LeaseState returns the live lease on key, or what became of its last one
// within lease.StatusWindow after it ended (lease.Revoker). Errors as for
// InspectLease.
func (b *Backend) LeaseState(ctx context.Context, key string) (lease.State, error) {
	if err := b.leaseCall(ctx, lease.CheckKey(key)); err != nil {
		return lease.State{}, err
	}
	t := &b.leases
	t.mu.Lock()
	defer t.mu.Unlock()
	now := b.clock.Now()
	m := t.marks[key]
	if e, ok := t.getLocked(key, now); ok {
		s := lease.State{Key: key, Status: lease.StatusActive, Owner: e.owner, Token: e.token, TTL: e.expires.Sub(now)}
		if m != nil && m.owner == e.owner && m.token == e.token && m.status == lease.StatusRevoked {
			s.Status, s.Reason, s.Forced = lease.StatusRevoked, m.reason, m.forced
		}
		return s, nil
	}
	if m == nil || now.Sub(m.until) > lease.StatusWindow {
		return lease.State{Key: key}, nil
	}
	s := lease.State{Key: key, Status: m.status, Owner: m.owner, Token: m.token, Reason: m.reason, Forced: m.forced}
	if s.Status == "" {
		s.Status = lease.StatusExpired
	}
	return s, nil
}
