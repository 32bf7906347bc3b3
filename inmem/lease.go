package inmem

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/leasebus/leasebus/lease"
)

// leaseTable holds the leases of a Backend. Expiry is lazy: a lease whose
// deadline has passed (as the Backend's Clock reads it) counts as free and is
// dropped the next time it is looked at, or by a sweep of the whole table
// that a new tenure runs at most once per leaseSweepEvery of the Clock.
//
// Fencing tokens come from one counter for the whole Backend, never reset:
// each new tenure, of any key, takes the next value. So the tokens of one key
// are strictly increasing across expiry, release and transfer without any
// per-key counter: the table holds live leases (and expired ones until the
// next sweep), and the marks of how recent tenures ended (revoke.go).
type leaseTable struct {
	mu        sync.Mutex
	live      map[string]leaseEntry
	token     uint64    // the last token handed out
	lastSweep time.Time // by the Backend's Clock; zero before the first tenure
	peak      int       // most entries live has held since its table was made

	marks      map[string]*leaseMark // revoke.go: status of the latest tenures
	marksSwept time.Time
	marksPeak  int // most entries marks has held since its table was made
}

// leaseSweepEvery is how often (by the Backend's Clock) a new tenure drops
// every expired lease from the table.
const leaseSweepEvery = time.Minute

type leaseEntry struct {
	owner   string
	token   uint64
	expires time.Time
}

func (t *leaseTable) init() {
	t.live = make(map[string]leaseEntry)
}

// sweepLocked drops every expired lease, at most once per leaseSweepEvery,
// and gives the map a fresh table when most of it was dropped (a Go map does
// not shrink by itself).
func (t *leaseTable) sweepLocked(now time.Time) {
	if t.lastSweep.IsZero() {
		t.lastSweep = now
	}
	if now.Sub(t.lastSweep) < leaseSweepEvery {
		return
	}
	t.lastSweep = now
	for key, e := range t.live {
		if !now.Before(e.expires) {
			delete(t.live, key)
		}
	}
	if t.peak >= 1024 && len(t.live) < t.peak/4 {
		t.live = shrunk(t.live)
		t.peak = len(t.live)
	}
}

// getLocked returns the live lease on key at now, dropping an expired one.
func (t *leaseTable) getLocked(key string, now time.Time) (leaseEntry, bool) {
	e, ok := t.live[key]
	if !ok {
		return leaseEntry{}, false
	}
	if !now.Before(e.expires) {
		delete(t.live, key)
		return leaseEntry{}, false
	}
	return e, true
}

// newTenureLocked gives key to owner with the next fencing token.
func (t *leaseTable) newTenureLocked(key, owner string, ttl time.Duration, now time.Time) leaseEntry {
	t.sweepLocked(now)
	t.token++
	e := leaseEntry{owner: owner, token: t.token, expires: now.Add(ttl)}
	t.live[key] = e
	t.markTenureLocked(key, e, now)
	t.peak = max(t.peak, len(t.live))
	return e
}

// renewLocked extends owner's live lease on key; it never creates one.
func (t *leaseTable) renewLocked(key, owner string, ttl time.Duration, now time.Time) bool {
	e, ok := t.getLocked(key, now)
	if !ok || e.owner != owner || t.revokedLocked(key, owner) != nil {
		return false
	}
	e.expires = now.Add(ttl)
	t.live[key] = e
	t.markExtendLocked(key, e)
	return true
}

// leaseCall runs the checks every lease method starts with: closed first
// (every call after Close returns lease.ErrClosed), then the input, then ctx.
func (b *Backend) leaseCall(ctx context.Context, check error) error {
	if b.isClosed() {
		return lease.ErrClosed
	}
	if check != nil {
		return check
	}
	return ctx.Err()
}

// AcquireLease takes key for owner for ttl when the key is free, expired or
// already owner's (then the TTL is refreshed and the token kept). A new
// tenure gets a fencing token above every token the Backend handed out
// before, for any key (one counter for the whole Backend), so above every
// earlier token of key. When
// another owner holds the key it returns Acquired false with that owner, its
// token and the time left, and a nil error. A refresh by a holder whose
// tenure was revoked (see RevokeLease) returns a *lease.RevokedError. It returns an error wrapping
// lease.ErrInvalid for bad input, lease.ErrClosed after Close, and ctx.Err()
// when ctx is done.
func (b *Backend) AcquireLease(ctx context.Context, key, owner string, ttl time.Duration) (lease.Result, error) {
	if err := b.leaseCall(ctx, lease.CheckAcquire(key, owner, ttl)); err != nil {
		return lease.Result{}, err
	}
	t := &b.leases
	t.mu.Lock()
	defer t.mu.Unlock()
	now := b.clock.Now()
	e, ok := t.getLocked(key, now)
	switch {
	case !ok:
		e = t.newTenureLocked(key, owner, ttl, now)
	case e.owner == owner:
		if err := t.revokedLocked(key, owner); err != nil {
			return lease.Result{}, err
		}
		e.expires = now.Add(ttl)
		t.live[key] = e
		t.markExtendLocked(key, e)
	default:
		return lease.Result{Owner: e.owner, Token: e.token, TTL: e.expires.Sub(now)}, nil
	}
	return lease.Result{Acquired: true, Owner: owner, Token: e.token, TTL: ttl}, nil
}

// GetLeaseOwner returns the holder of the live lease on key, or "" when there
// is none. Errors as for AcquireLease.
func (b *Backend) GetLeaseOwner(ctx context.Context, key string) (string, error) {
	if err := b.leaseCall(ctx, lease.CheckKey(key)); err != nil {
		return "", err
	}
	t := &b.leases
	t.mu.Lock()
	defer t.mu.Unlock()
	e, _ := t.getLocked(key, b.clock.Now())
	return e.owner, nil
}

// ReleaseLease deletes the lease on key when owner holds it, and otherwise
// does nothing and returns nil. Nothing of the key is left behind: the next
// tenure's token still comes from the Backend-wide counter. Errors as for
// AcquireLease.
func (b *Backend) ReleaseLease(ctx context.Context, key, owner string) error {
	if err := b.leaseCall(ctx, lease.CheckRelease(key, owner)); err != nil {
		return err
	}
	return b.release(key, owner, 0)
}

// ReleaseLeaseToken is ReleaseLease that deletes the lease only when owner
// holds it in the tenure of token (lease.TokenReleaser). A token of 0 is bad
// input.
func (b *Backend) ReleaseLeaseToken(ctx context.Context, key, owner string, token uint64) error {
	check := lease.CheckRelease(key, owner)
	if check == nil && token == 0 {
		check = fmt.Errorf("%w: token is 0 (key %q)", lease.ErrInvalid, key)
	}
	if err := b.leaseCall(ctx, check); err != nil {
		return err
	}
	return b.release(key, owner, token)
}

// release deletes owner's lease on key (of the tenure of token, unless 0).
func (b *Backend) release(key, owner string, token uint64) error {
	t := &b.leases
	t.mu.Lock()
	defer t.mu.Unlock()
	now := b.clock.Now()
	if e, ok := t.getLocked(key, now); ok && e.owner == owner && (token == 0 || e.token == token) {
		delete(t.live, key)
		t.markReleaseLocked(key, now)
	}
	return nil
}

// RenewLease extends owner's live lease on key to ttl from now and reports
// true, or reports false when owner holds no live lease on key; it never
// re-creates an expired lease. When owner's tenure was revoked it returns a
// *lease.RevokedError. Errors as for AcquireLease.
func (b *Backend) RenewLease(ctx context.Context, key, owner string, ttl time.Duration) (bool, error) {
	if err := b.leaseCall(ctx, lease.CheckAcquire(key, owner, ttl)); err != nil {
		return false, err
	}
	t := &b.leases
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.revokedLocked(key, owner); err != nil {
		return false, err
	}
	return t.renewLocked(key, owner, ttl, b.clock.Now()), nil
}

// TransferLease hands key from fromOwner to toOwner in one step under the
// table's lock, so the key is never free in between: toOwner gets a new
// fencing token and a full ttl. It reports false, changing nothing, when
// fromOwner holds no live lease on key, and returns a *lease.RevokedError
// when fromOwner's tenure was revoked. Errors as for AcquireLease.
func (b *Backend) TransferLease(ctx context.Context, key, fromOwner, toOwner string, ttl time.Duration) (bool, error) {
	tok, err := b.TransferLeaseToken(ctx, key, fromOwner, toOwner, ttl)
	return tok > 0, err
}

// TransferLeaseToken is TransferLease that also returns toOwner's fencing
// token (0 when refused): lease.TokenTransferer.
func (b *Backend) TransferLeaseToken(ctx context.Context, key, fromOwner, toOwner string, ttl time.Duration) (uint64, error) {
	if err := b.leaseCall(ctx, lease.CheckTransfer(key, fromOwner, toOwner, ttl)); err != nil {
		return 0, err
	}
	t := &b.leases
	t.mu.Lock()
	defer t.mu.Unlock()
	now := b.clock.Now()
	if err := t.revokedLocked(key, fromOwner); err != nil {
		return 0, err
	}
	if e, ok := t.getLocked(key, now); !ok || e.owner != fromOwner {
		return 0, nil
	}
	return t.newTenureLocked(key, toOwner, ttl, now).token, nil
}

// InspectLease returns the live lease on key, or an Info with only Key set
// when there is none. Errors as for GetLeaseOwner.
func (b *Backend) InspectLease(ctx context.Context, key string) (lease.Info, error) {
	if err := b.leaseCall(ctx, lease.CheckKey(key)); err != nil {
		return lease.Info{}, err
	}
	t := &b.leases
	t.mu.Lock()
	defer t.mu.Unlock()
	now := b.clock.Now()
	e, ok := t.getLocked(key, now)
	if !ok {
		return lease.Info{Key: key}, nil
	}
	return lease.Info{Key: key, Owner: e.owner, Token: e.token, TTL: e.expires.Sub(now)}, nil
}

// ListLeases returns every live lease whose key starts with prefix ("" lists
// all), sorted by key. It returns lease.ErrClosed after Close and ctx.Err()
// when ctx is done.
func (b *Backend) ListLeases(ctx context.Context, prefix string) ([]lease.Info, error) {
	if err := b.leaseCall(ctx, nil); err != nil {
		return nil, err
	}
	t := &b.leases
	t.mu.Lock()
	now := b.clock.Now()
	var out []lease.Info
	for key := range t.live {
		if !strings.HasPrefix(key, prefix) {
			continue
		}
		if e, ok := t.getLocked(key, now); ok {
			out = append(out, lease.Info{Key: key, Owner: e.owner, Token: e.token, TTL: e.expires.Sub(now)})
		}
	}
	t.mu.Unlock()
	slices.SortFunc(out, func(a, b lease.Info) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}

// RenewLeases renews each request as RenewLease would, all at one instant of
// the Backend's clock, and returns one result per request, in order; a
// request whose tenure was revoked reports false, and the call then returns
// a *lease.BatchError whose entry for it is the *lease.RevokedError that
// RenewLease would return (the other entries nil). A bad
// request fails the whole call with an error wrapping lease.ErrInvalid and
// renews nothing; after Close it returns lease.ErrClosed.
func (b *Backend) RenewLeases(ctx context.Context, reqs []lease.Renewal) ([]bool, error) {
	if err := b.leaseCall(ctx, lease.CheckRenewals(reqs)); err != nil {
		return nil, err
	}
	out := make([]bool, len(reqs))
	var errs []error
	t := &b.leases
	t.mu.Lock()
	defer t.mu.Unlock()
	now := b.clock.Now()
	for i, r := range reqs {
		if err := t.revokedLocked(r.Key, r.Owner); err != nil {
			if errs == nil {
				errs = make([]error, len(reqs))
			}
			errs[i] = err
			continue
		}
		out[i] = t.renewLocked(r.Key, r.Owner, r.TTL, now)
	}
	if errs != nil {
		return out, &lease.BatchError{Errs: errs}
	}
	return out, nil
}
