package leasetest

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/leasebus/leasebus/lease"
)

// hangProvider wraps a provider for the NeverReturningCall rule: renew calls
// that touch a key in hang (or every renew call, once all is set) block,
// ignoring their ctx, until release is closed, as a call on a black-holed
// network with a client that ignores ctx deadlines does. It records, per
// key, when the last renew (or acquire) call that succeeded started.
type hangProvider struct {
	lease.Provider
	release chan struct{} // closed at the end of the test

	mu      sync.Mutex
	hang    map[string]bool
	all     bool
	hung    map[string]chan struct{} // closed when a call of the key first hangs
	started map[string]time.Time     // start of the last successful call, per key
}

func newHangProvider(p lease.Provider) *hangProvider {
	return &hangProvider{
		Provider: p,
		release:  make(chan struct{}),
		hang:     make(map[string]bool),
		hung:     make(map[string]chan struct{}),
		started:  make(map[string]time.Time),
	}
}

// hungCh returns the channel closed when a renew call of key first hangs.
// h.mu is held.
func (h *hangProvider) hungCh(key string) chan struct{} {
	c, ok := h.hung[key]
	if !ok {
		c = make(chan struct{})
		h.hung[key] = c
	}
	return c
}

// whenHung returns a channel closed once a renew call of key hangs.
func (h *hangProvider) whenHung(key string) <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.hungCh(key)
}

func (h *hangProvider) hangKey(key string) {
	h.mu.Lock()
	h.hang[key] = true
	h.mu.Unlock()
}

func (h *hangProvider) hangAll() {
	h.mu.Lock()
	h.all = true
	h.mu.Unlock()
}

func (h *hangProvider) lastSuccess(key string) time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.started[key]
}

// maybeHang blocks until release when a call touching keys must hang.
func (h *hangProvider) maybeHang(keys ...string) {
	h.mu.Lock()
	hang := h.all
	for _, k := range keys {
		hang = hang || h.hang[k]
	}
	if hang {
		for _, k := range keys {
			c := h.hungCh(k)
			select {
			case <-c:
			default:
				close(c)
			}
		}
	}
	h.mu.Unlock()
	if hang {
		<-h.release
	}
}

func (h *hangProvider) succeeded(key string, start time.Time) {
	h.mu.Lock()
	if start.After(h.started[key]) {
		h.started[key] = start
	}
	h.mu.Unlock()
}

func (h *hangProvider) AcquireLease(ctx context.Context, key, owner string, ttl time.Duration) (lease.Result, error) {
	start := time.Now()
	r, err := h.Provider.AcquireLease(ctx, key, owner, ttl)
	if err == nil && r.Acquired {
		h.succeeded(key, start)
	}
	return r, err
}

func (h *hangProvider) RenewLease(ctx context.Context, key, owner string, ttl time.Duration) (bool, error) {
	start := time.Now()
	h.maybeHang(key)
	ok, err := h.Provider.RenewLease(ctx, key, owner, ttl)
	if err == nil && ok {
		h.succeeded(key, start)
	}
	return ok, err
}

// hangBatch is hangProvider with batch renewal, for providers that have it.
type hangBatch struct {
	*hangProvider
	br lease.BatchRenewer
}

func (h *hangBatch) RenewLeases(ctx context.Context, reqs []lease.Renewal) ([]bool, error) {
	start := time.Now()
	keys := make([]string, len(reqs))
	for i, r := range reqs {
		keys[i] = r.Key
	}
	h.maybeHang(keys...)
	oks, err := h.br.RenewLeases(ctx, reqs)
	for i, ok := range oks {
		if ok && err == nil {
			h.succeeded(reqs[i].Key, start)
		}
	}
	return oks, err
}

// testNeverReturningCall checks that a Keeper fails closed whatever the
// provider's calls do: with renew calls that never return (ignoring ctx),
// a Held is reported lost (Err non-nil) no later than the start of its last
// successful acquire or renew call plus its TTL, so never after the backend
// could give the key to someone else; and when another owner's AcquireLease
// wins, the Held's Err is already non-nil. One Keeper holds leases of mixed
// TTLs; the short one is taken while the long one's renewal hangs.
//
// The Keeper works on real time whatever the provider's clock, so with a
// fake clock (Config.Advance set) the rule uses at most DefaultTTL.
func testNeverReturningCall(e *env) {
	if e.c.Advance != nil {
		e.ttl = min(e.ttl, DefaultTTL)
	}
	hp := newHangProvider(e.p)
	var p lease.Provider = hp
	if br, ok := e.p.(lease.BatchRenewer); ok {
		p = &hangBatch{hangProvider: hp, br: br}
	}
	k := lease.NewKeeper(p, lease.KeeperOptions{RenewEvery: e.ttl / 3})
	// Cleanups run last-in first-out: release the hung calls, then close the
	// Keeper (which waits for them).
	e.t.Cleanup(func() { k.Close() })
	e.t.Cleanup(func() { close(hp.release) })

	long, short := e.key("long"), e.key("short")
	longTTL := 5 * e.ttl
	hp.hangKey(long)
	hl, err := k.Keep(e.ctx, long, "a", longTTL)
	if err != nil {
		e.t.Fatalf("Keep(%q): %v", long, err)
	}
	<-hp.whenHung(long)
	hs, err := k.Keep(e.ctx, short, "a", e.ttl)
	if err != nil {
		e.t.Fatalf("Keep(%q) while another renewal hangs: %v", short, err)
	}
	// Let the short lease renew a few times beside the hung call, then
	// hang every call.
	// (Real time: the Keeper works on it whatever the provider's clock.)
	time.Sleep(e.ttl)
	hp.hangAll()
	select {
	case <-hp.whenHung(short):
	case <-time.After(10 * e.ttl):
		e.t.Fatalf("no renewal of %q was sent within 10 TTL", short)
	}
	for _, c := range []struct {
		h   *lease.Held
		ttl time.Duration
	}{{hs, e.ttl}, {hl, longTTL}} {
		bound := hp.lastSuccess(c.h.Key()).Add(c.ttl)
		if d := c.h.Deadline(); d.After(bound) {
			e.t.Fatalf("Held %q: loss deadline %v is after the last successful call's start + TTL (%v)", c.h.Key(), d, bound)
		}
		// Wait for the other owner to win, checking at each try that the
		// Held is not live past what the backend allows.
		for {
			now := time.Now()
			live := c.h.Err() == nil
			if live && !now.Before(bound) {
				e.t.Fatalf("Held %q live at %v, past the start of its last successful call + TTL (%v)", c.h.Key(), now, bound)
			}
			if !live && e.c.Advance != nil {
				break // a fake-clock backend: its expiry is not on real time
			}
			r, err := e.p.AcquireLease(e.ctx, c.h.Key(), "b", e.ttl)
			if err != nil {
				e.t.Fatalf("AcquireLease by b: %v", err)
			}
			if r.Acquired {
				if err := c.h.Err(); err == nil {
					e.t.Fatalf("b acquired %q while a's Held still reports it live", c.h.Key())
				}
				break
			}
			if now.After(bound.Add(10 * e.ttl)) {
				e.t.Fatalf("b never acquired %q, 10 TTL after it should have expired (holder %q)", c.h.Key(), r.Owner)
			}
			time.Sleep(e.ttl / 50)
		}
		if err := c.h.Err(); !errors.Is(err, lease.ErrNotHeld) {
			e.t.Fatalf("Held %q ended with %v, want ErrNotHeld", c.h.Key(), err)
		}
	}
}
