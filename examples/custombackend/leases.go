package main

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/leasebus/leasebus/lease"
)

// MapLeases is a lease.Provider kept in a map behind one mutex: the smallest
// correct lease backend. Tenures get fencing tokens from a per-key counter
// that outlives the lease, so tokens never go backwards. It also implements
// lease.Inspector. The zero value is not usable; call NewMapLeases.
type MapLeases struct {
	now func() time.Time

	mu     sync.Mutex
	closed bool
	leases map[string]mapLease
	fence  map[string]uint64 // last token handed out per key; never deleted
}

type mapLease struct {
	owner   string
	token   uint64
	expires time.Time
}

var (
	_ lease.Provider  = (*MapLeases)(nil)
	_ lease.Inspector = (*MapLeases)(nil)
)

// NewMapLeases returns an empty MapLeases on the system clock.
func NewMapLeases() *MapLeases {
	return &MapLeases{now: time.Now, leases: map[string]mapLease{}, fence: map[string]uint64{}}
}

// live returns the live lease of key, dropping an expired one. Call with mu
// held.
func (m *MapLeases) live(key string, now time.Time) (mapLease, bool) {
	l, ok := m.leases[key]
	if ok && !now.Before(l.expires) {
		delete(m.leases, key)
		return mapLease{}, false
	}
	return l, ok
}

// newTenure gives key to owner with the next token. Call with mu held.
func (m *MapLeases) newTenure(key, owner string, ttl time.Duration, now time.Time) mapLease {
	m.fence[key]++
	l := mapLease{owner: owner, token: m.fence[key], expires: now.Add(ttl)}
	m.leases[key] = l
	return l
}

// AcquireLease takes key for owner when it is free, expired or already held
// by owner (then the TTL is refreshed and the token kept).
func (m *MapLeases) AcquireLease(_ context.Context, key, owner string, ttl time.Duration) (lease.Result, error) {
	if err := lease.CheckAcquire(key, owner, ttl); err != nil {
		return lease.Result{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return lease.Result{}, lease.ErrClosed
	}
	now := m.now()
	l, ok := m.live(key, now)
	switch {
	case !ok:
		l = m.newTenure(key, owner, ttl, now)
	case l.owner == owner:
		l.expires = now.Add(ttl)
		m.leases[key] = l
	default:
		return lease.Result{Owner: l.owner, Token: l.token, TTL: l.expires.Sub(now)}, nil
	}
	return lease.Result{Acquired: true, Owner: owner, Token: l.token, TTL: ttl}, nil
}

// GetLeaseOwner returns the holder of key, or "" when none.
func (m *MapLeases) GetLeaseOwner(_ context.Context, key string) (string, error) {
	if err := lease.CheckKey(key); err != nil {
		return "", err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return "", lease.ErrClosed
	}
	l, _ := m.live(key, m.now())
	return l.owner, nil
}

// ReleaseLease deletes key's lease when owner holds it.
func (m *MapLeases) ReleaseLease(_ context.Context, key, owner string) error {
	if err := lease.CheckRelease(key, owner); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return lease.ErrClosed
	}
	if l, ok := m.live(key, m.now()); ok && l.owner == owner {
		delete(m.leases, key)
	}
	return nil
}

// RenewLease extends owner's live lease on key to ttl from now.
func (m *MapLeases) RenewLease(_ context.Context, key, owner string, ttl time.Duration) (bool, error) {
	if err := lease.CheckAcquire(key, owner, ttl); err != nil {
		return false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return false, lease.ErrClosed
	}
	now := m.now()
	l, ok := m.live(key, now)
	if !ok || l.owner != owner {
		return false, nil
	}
	l.expires = now.Add(ttl)
	m.leases[key] = l
	return true, nil
}

// TransferLease hands key from fromOwner to toOwner with a new token, under
// the one mutex, so the key is never free in between.
func (m *MapLeases) TransferLease(_ context.Context, key, fromOwner, toOwner string, ttl time.Duration) (bool, error) {
	if err := lease.CheckTransfer(key, fromOwner, toOwner, ttl); err != nil {
		return false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return false, lease.ErrClosed
	}
	now := m.now()
	l, ok := m.live(key, now)
	if !ok || l.owner != fromOwner {
		return false, nil
	}
	m.newTenure(key, toOwner, ttl, now)
	return true, nil
}

// InspectLease returns key's live lease, or an Info with only Key set.
func (m *MapLeases) InspectLease(_ context.Context, key string) (lease.Info, error) {
	if err := lease.CheckKey(key); err != nil {
		return lease.Info{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return lease.Info{}, lease.ErrClosed
	}
	now := m.now()
	l, ok := m.live(key, now)
	if !ok {
		return lease.Info{Key: key}, nil
	}
	return lease.Info{Key: key, Owner: l.owner, Token: l.token, TTL: l.expires.Sub(now)}, nil
}

// ListLeases returns the live leases whose key starts with prefix.
func (m *MapLeases) ListLeases(_ context.Context, prefix string) ([]lease.Info, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, lease.ErrClosed
	}
	now := m.now()
	var out []lease.Info
	for key := range m.leases {
		if !strings.HasPrefix(key, prefix) {
			continue
		}
		if l, ok := m.live(key, now); ok {
			out = append(out, lease.Info{Key: key, Owner: l.owner, Token: l.token, TTL: l.expires.Sub(now)})
		}
	}
	return out, nil
}

// Close makes every later call return lease.ErrClosed. It is idempotent.
func (m *MapLeases) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	return nil
}
