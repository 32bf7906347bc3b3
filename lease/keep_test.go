package lease_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/leasebus/leasebus/inmem"
	"github.com/leasebus/leasebus/lease"
)

var errFlaky = errors.New("flaky: connection refused")

// flaky wraps a provider, hiding its optional capabilities, and fails or
// hangs renewals and acquires on demand. It records when the backend would
// expire the lease, as of its last successful acquire or renewal.
type flaky struct {
	lease.Provider
	mu          sync.Mutex
	renewMode   string // "", "fail", "hang"
	failAcquire int    // fail this many acquires
	expiry      time.Time
	renews      int
}

func (f *flaky) set(mode string) { f.mu.Lock(); f.renewMode = mode; f.mu.Unlock() }

func (f *flaky) serverExpiry() time.Time { f.mu.Lock(); defer f.mu.Unlock(); return f.expiry }

func (f *flaky) AcquireLease(ctx context.Context, key, owner string, ttl time.Duration) (lease.Result, error) {
	f.mu.Lock()
	if f.failAcquire > 0 {
		f.failAcquire--
		f.mu.Unlock()
		return lease.Result{}, errFlaky
	}
	f.mu.Unlock()
	r, err := f.Provider.AcquireLease(ctx, key, owner, ttl)
	if err == nil && r.Acquired {
		f.mu.Lock()
		f.expiry = time.Now().Add(ttl)
		f.mu.Unlock()
	}
	return r, err
}

// before applies the renew mode; it returns a non-nil error to fail with.
func (f *flaky) before(ctx context.Context) error {
	f.mu.Lock()
	mode := f.renewMode
	f.mu.Unlock()
	switch mode {
	case "fail":
		return errFlaky
	case "hang":
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

func (f *flaky) renewed(ttl time.Duration) {
	f.mu.Lock()
	f.expiry = time.Now().Add(ttl)
	f.renews++
	f.mu.Unlock()
}

func (f *flaky) RenewLease(ctx context.Context, key, owner string, ttl time.Duration) (bool, error) {
	if err := f.before(ctx); err != nil {
		return false, err
	}
	ok, err := f.Provider.RenewLease(ctx, key, owner, ttl)
	if ok {
		f.renewed(ttl)
	}
	return ok, err
}

// flakyBatch is flaky with batch renewal.
type flakyBatch struct {
	*flaky
	br lease.BatchRenewer
}

func (f *flakyBatch) RenewLeases(ctx context.Context, reqs []lease.Renewal) ([]bool, error) {
	if err := f.before(ctx); err != nil {
		return nil, err
	}
	oks, err := f.br.RenewLeases(ctx, reqs)
	for i, ok := range oks {
		if ok {
			f.renewed(reqs[i].TTL)
		}
	}
	return oks, err
}

// bubbleBackend returns an inmem backend for a synctest bubble. At the end
// of the test it closes the backend and lets fake time run, so that every
// Held still kept ends (its renewals fail with ErrClosed), renewals in
// flight finish, and every goroutine of the bubble exits, even when the test
// failed half-way.
func bubbleBackend(t *testing.T) *inmem.Backend {
	b := inmem.New()
	t.Cleanup(func() {
		b.Close()
		time.Sleep(2 * ttl)
	})
	return b
}

// newBackend returns an inmem backend closed when the test ends.
func newBackend(t *testing.T) *inmem.Backend {
	b := inmem.New()
	t.Cleanup(func() { b.Close() })
	return b
}

func owner(t *testing.T, p lease.Provider, key string) string {
	t.Helper()
	o, err := p.GetLeaseOwner(context.Background(), key)
	if err != nil {
		t.Fatalf("GetLeaseOwner(%q): %v", key, err)
	}
	return o
}

func isDone(h *lease.Held) bool {
	select {
	case <-h.Done():
		return true
	default:
		return false
	}
}

const ttl = 30 * time.Second

func TestKeepRenewsPastManyTTLs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := bubbleBackend(t)
		f := &flaky{Provider: b}
		h, err := lease.Keep(t.Context(), f, "k", "a", ttl)
		if err != nil {
			t.Fatal(err)
		}
		if h.Key() != "k" || h.Owner() != "a" || h.Token() != 1 || h.TTL() != ttl {
			t.Fatalf("Held = %s %s %d %v, want k a 1 %v", h.Key(), h.Owner(), h.Token(), h.TTL(), ttl)
		}
		time.Sleep(10 * ttl)
		if isDone(h) || h.Err() != nil || h.Context().Err() != nil {
			t.Fatalf("after 10 TTLs the Held ended: %v", h.Err())
		}
		if o := owner(t, b, "k"); o != "a" {
			t.Fatalf("owner after 10 TTLs = %q, want a", o)
		}
		f.mu.Lock()
		renews := f.renews
		f.mu.Unlock()
		if renews < 29 || renews > 31 {
			t.Fatalf("renewals in 10 TTLs = %d, want about 30 (every TTL/3)", renews)
		}
		if err := h.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		if !isDone(h) || !errors.Is(h.Err(), lease.ErrReleased) || context.Cause(h.Context()) != lease.ErrReleased {
			t.Fatalf("after Release: done %v, Err %v; want done, ErrReleased", isDone(h), h.Err())
		}
		if o := owner(t, b, "k"); o != "" {
			t.Fatalf("owner after Release = %q, want none", o)
		}
		if err := h.Release(t.Context()); err != nil {
			t.Fatalf("second Release = %v, want nil", err)
		}
	})
}

func TestKeepLostWhenTaken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		b := bubbleBackend(t)
		h, err := lease.Keep(ctx, b, "k", "a", ttl)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(ttl)
		// Someone deletes the lease and takes the key.
		if err := b.ReleaseLease(ctx, "k", "a"); err != nil {
			t.Fatal(err)
		}
		if r, err := b.AcquireLease(ctx, "k", "thief", ttl); err != nil || !r.Acquired {
			t.Fatalf("thief: %+v, %v", r, err)
		}
		start := time.Now()
		<-h.Done()
		if d := time.Since(start); d > ttl/3 {
			t.Fatalf("loss noticed after %v, want within one renewal interval", d)
		}
		if !errors.Is(h.Err(), lease.ErrNotHeld) || context.Cause(h.Context()) != h.Err() {
			t.Fatalf("Err = %v, cause %v; want ErrNotHeld for both", h.Err(), context.Cause(h.Context()))
		}
		if _, err := h.Transfer(ctx, "c"); !errors.Is(err, lease.ErrNotHeld) {
			t.Fatalf("Transfer after loss = %v, want ErrNotHeld", err)
		}
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if o := owner(t, b, "k"); o != "thief" {
			t.Fatalf("owner = %q, want thief", o)
		}
	})
}

func TestKeepFailsClosed(t *testing.T) {
	for _, tc := range []struct {
		name, mode string
		batch      bool
	}{
		{"RenewErrors", "fail", false},
		{"BatchRenewErrors", "fail", true},
		{"RenewHangs", "hang", false},
		{"BatchRenewHangs", "hang", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := t.Context()
				b := bubbleBackend(t)
				f := &flaky{Provider: b}
				var p lease.Provider = f
				if tc.batch {
					p = &flakyBatch{flaky: f, br: b}
				}
				h, err := lease.Keep(ctx, p, "k", "a", ttl)
				if err != nil {
					t.Fatal(err)
				}
				time.Sleep(2*ttl + ttl/5)
				f.set(tc.mode)
				expiry := f.serverExpiry()
				<-h.Done()
				if !time.Now().Before(expiry) {
					t.Fatalf("Done closed at %v, not before the server-side expiry %v", time.Now(), expiry)
				}
				if o := owner(t, b, "k"); o != "a" {
					t.Fatalf("at the loss the backend's holder is %q, want a: the lease should not have expired yet", o)
				}
				err = h.Err()
				if !errors.Is(err, lease.ErrNotHeld) || context.Cause(h.Context()) != err {
					t.Fatalf("Err = %v, want ErrNotHeld (and the same context cause)", err)
				}
				if tc.mode == "fail" && !errors.Is(err, errFlaky) {
					t.Fatalf("Err = %v, want it to wrap the renew error", err)
				}
				if tc.mode == "hang" && !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("Err = %v, want it to wrap the deadline of the renewal", err)
				}
				f.set("")
				if err := h.Release(ctx); err != nil {
					t.Fatal(err)
				}
				if o := owner(t, b, "k"); o != "" {
					t.Fatalf("owner after Release = %q, want none", o)
				}
			})
		})
	}
}

func TestKeepSurvivesTransientErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := bubbleBackend(t)
		f := &flaky{Provider: b}
		h, err := lease.Keep(t.Context(), f, "k", "a", ttl)
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			time.Sleep(ttl / 4)
			f.set("fail")
			time.Sleep(ttl / 3)
			f.set("")
		}
		time.Sleep(ttl)
		if isDone(h) {
			t.Fatalf("Held lost after transient errors: %v", h.Err())
		}
		if err := h.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
	})
}

func TestKeepErrors(t *testing.T) {
	ctx := t.Context()
	b := inmem.New()
	defer b.Close()
	if _, err := b.AcquireLease(ctx, "taken", "x", time.Hour); err != nil {
		t.Fatal(err)
	}
	_, err := lease.Keep(ctx, b, "taken", "a", ttl)
	var he *lease.HeldError
	if !errors.Is(err, lease.ErrHeld) || !errors.As(err, &he) || he.Owner != "x" || he.Token != 1 {
		t.Fatalf("Keep of a held key = %v, want a HeldError naming x", err)
	}

	f := &flaky{Provider: b, failAcquire: 1}
	if _, err := lease.Keep(ctx, f, "k", "a", ttl); !errors.Is(err, errFlaky) || errors.Is(err, lease.ErrHeld) {
		t.Fatalf("Keep with a failing acquire = %v, want the transport error", err)
	}

	for _, tc := range []struct {
		name, field string
		k           *lease.Keeper
		p           lease.Provider
		key         string
		ttl         time.Duration
	}{
		{"NilProvider", "provider", nil, nil, "k", ttl},
		{"EmptyKey", "key", nil, b, "", ttl},
		{"ZeroTTL", "ttl", nil, b, "k", 0},
		{"RenewEveryNotBelowTTL", "RenewEvery", lease.NewKeeper(b, lease.KeeperOptions{RenewEvery: ttl}), nil, "k", ttl},
		{"NegativeRenewEvery", "RenewEvery", lease.NewKeeper(b, lease.KeeperOptions{RenewEvery: -1}), nil, "k", ttl},
	} {
		var err error
		if tc.k != nil {
			_, err = tc.k.Keep(ctx, tc.key, "a", tc.ttl)
		} else {
			_, err = lease.Keep(ctx, tc.p, tc.key, "a", tc.ttl)
		}
		if !errors.Is(err, lease.ErrInvalid) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: %v, want ErrInvalid naming %s", tc.name, err, tc.field)
		}
	}
	if o := owner(t, b, "k"); o != "" {
		t.Fatalf("owner of k = %q after failed Keeps, want none", o)
	}
}

func TestKeepHeldTransfer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		b := bubbleBackend(t)
		h, err := lease.Keep(ctx, b, "k", "a", ttl)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.Transfer(ctx, "a"); !errors.Is(err, lease.ErrInvalid) {
			t.Fatalf("Transfer to itself = %v, want ErrInvalid", err)
		}
		time.Sleep(ttl / 2)
		h2, err := h.Transfer(ctx, "b")
		if err != nil {
			t.Fatal(err)
		}
		if !isDone(h) || h.Err() != lease.ErrTransferred {
			t.Fatalf("old Held: done %v, Err %v; want done, ErrTransferred", isDone(h), h.Err())
		}
		if h2.Owner() != "b" || h2.Key() != "k" || h2.Token() <= h.Token() || h2.TTL() != ttl {
			t.Fatalf("new Held = %s %s token %d; want b on k with a token > %d", h2.Owner(), h2.Key(), h2.Token(), h.Token())
		}
		time.Sleep(5 * ttl)
		if isDone(h2) {
			t.Fatalf("new Held lost: %v", h2.Err())
		}
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if o := owner(t, b, "k"); o != "b" {
			t.Fatalf("owner = %q after the old Held's Release, want b", o)
		}
		// A refused transfer ends the Held.
		if err := b.ReleaseLease(ctx, "k", "b"); err != nil {
			t.Fatal(err)
		}
		if _, err := h2.Transfer(ctx, "c"); !errors.Is(err, lease.ErrNotHeld) {
			t.Fatalf("Transfer of a lost lease = %v, want ErrNotHeld", err)
		}
		if !isDone(h2) || !errors.Is(h2.Err(), lease.ErrNotHeld) {
			t.Fatalf("Held after a refused transfer: done %v, Err %v", isDone(h2), h2.Err())
		}
		if o := owner(t, b, "k"); o != "" {
			t.Fatalf("owner = %q, want none", o)
		}
	})
}

func TestKeeperClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		b := bubbleBackend(t)
		k := lease.NewKeeper(b, lease.KeeperOptions{RenewEvery: ttl / 2})
		h1, err := k.Keep(ctx, "k1", "a", ttl)
		if err != nil {
			t.Fatal(err)
		}
		h2, err := k.Keep(ctx, "k2", "a", ttl)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * ttl)
		if isDone(h1) || isDone(h2) {
			t.Fatal("Helds ended before Close")
		}
		if err := k.Close(); err != nil {
			t.Fatal(err)
		}
		for _, h := range []*lease.Held{h1, h2} {
			if !isDone(h) || h.Err() != lease.ErrClosed {
				t.Fatalf("after Close: done %v, Err %v; want ErrClosed", isDone(h), h.Err())
			}
		}
		if o := owner(t, b, "k1"); o != "a" {
			t.Fatalf("Close released the lease (owner %q); it must not", o)
		}
		if _, err := k.Keep(ctx, "k3", "a", ttl); !errors.Is(err, lease.ErrClosed) {
			t.Fatalf("Keep after Close = %v, want ErrClosed", err)
		}
		if err := k.Close(); err != nil {
			t.Fatalf("second Close = %v", err)
		}
		if err := h1.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if o := owner(t, b, "k1"); o != "" {
			t.Fatalf("Release after Close left owner %q", o)
		}
	})
}

// TestSharedKeeperExits runs on real time: the shared Keeper's goroutine must
// be gone as soon as its last Held is released, not at its next timer.
func TestKeepSharedKeeperExits(t *testing.T) {
	ctx := t.Context()
	b := inmem.New()
	defer b.Close()
	for round := range 2 { // the goroutine restarts on demand
		var hs []*lease.Held
		for i := range 3 {
			h, err := lease.Keep(ctx, b, fmt.Sprint("k", i), "a", time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			hs = append(hs, h)
		}
		for _, h := range hs {
			if err := h.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if err := goleak.Find(); err != nil {
			t.Fatalf("round %d: goroutine left after releasing every Held: %v", round, err)
		}
	}
}

// batchCounter counts RenewLeases calls and their sizes.
type batchCounter struct {
	*inmem.Backend
	mu       sync.Mutex
	calls    int
	maxBatch int
}

func (c *batchCounter) RenewLeases(ctx context.Context, reqs []lease.Renewal) ([]bool, error) {
	c.mu.Lock()
	c.calls++
	c.maxBatch = max(c.maxBatch, len(reqs))
	c.mu.Unlock()
	return c.Backend.RenewLeases(ctx, reqs)
}

func (c *batchCounter) reset() (calls, maxBatch int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	calls, maxBatch = c.calls, c.maxBatch
	c.calls, c.maxBatch = 0, 0
	return calls, maxBatch
}

func TestKeepBatches10000(t *testing.T) {
	const n, groups = 10000, 100
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		b := bubbleBackend(t)
		c := &batchCounter{Backend: b}
		hs := make([]*lease.Held, 0, n)
		// Acquire in groups spread over a whole renewal interval.
		for g := range groups {
			for i := range n / groups {
				h, err := lease.Keep(ctx, c, fmt.Sprintf("k%d-%d", g, i), "a", ttl)
				if err != nil {
					t.Fatal(err)
				}
				hs = append(hs, h)
			}
			time.Sleep(ttl / 3 / groups)
		}
		time.Sleep(2 * ttl) // batches align
		c.reset()
		const periods = 3
		time.Sleep(periods * ttl / 3)
		calls, maxBatch := c.reset()
		if calls > periods*10 || maxBatch > 1000 {
			t.Fatalf("%d Helds: %d RenewLeases calls in %d periods (largest %d), want ≤ 10 per period of ≤ 1000", n, calls, periods, maxBatch)
		}
		for _, h := range hs {
			if isDone(h) {
				t.Fatalf("Held %s lost: %v", h.Key(), h.Err())
			}
		}
		for _, h := range hs {
			if err := h.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// slowRenewer has no batch renewal and takes a while per renewal, counting
// how many run at once.
type slowRenewer struct {
	lease.Provider
	mu            sync.Mutex
	now, maxNow   int
	renewalsTotal int
}

func (s *slowRenewer) RenewLease(ctx context.Context, key, owner string, ttl time.Duration) (bool, error) {
	s.mu.Lock()
	s.now++
	s.renewalsTotal++
	s.maxNow = max(s.maxNow, s.now)
	s.mu.Unlock()
	time.Sleep(10 * time.Millisecond)
	s.mu.Lock()
	s.now--
	s.mu.Unlock()
	return s.Provider.RenewLease(ctx, key, owner, ttl)
}

func TestKeepRenewsOneByOneBounded(t *testing.T) {
	const n = 200
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		b := bubbleBackend(t)
		s := &slowRenewer{Provider: b}
		hs := make([]*lease.Held, 0, n)
		for i := range n {
			h, err := lease.Keep(ctx, s, fmt.Sprint("k", i), "a", ttl)
			if err != nil {
				t.Fatal(err)
			}
			hs = append(hs, h)
		}
		time.Sleep(ttl)
		s.mu.Lock()
		maxNow, total := s.maxNow, s.renewalsTotal
		s.mu.Unlock()
		if maxNow != 64 || total < 2*n {
			t.Fatalf("renewals: %d in flight at most, %d in all; want 64 and at least %d", maxNow, total, 2*n)
		}
		for _, h := range hs {
			if isDone(h) {
				t.Fatalf("Held lost: %v", h.Err())
			}
			if err := h.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// acquireCounter is a Provider (only the methods of lease.Provider: it hides
// the wrapped backend's optional capabilities) that counts AcquireLease calls.
type acquireCounter struct {
	lease.Provider
	acquires atomic.Int64
}

func (c *acquireCounter) AcquireLease(ctx context.Context, key, owner string, ttl time.Duration) (lease.Result, error) {
	c.acquires.Add(1)
	return c.Provider.AcquireLease(ctx, key, owner, ttl)
}

// tokenCounter is acquireCounter with the backend's TransferLeaseToken.
type tokenCounter struct {
	*acquireCounter
	lease.TokenTransferer
}

// TestKeepHeldTransferToken: on a provider that reports the new owner's
// token with the transfer (lease.TokenTransferer), Held.Transfer makes no
// AcquireLease to read it back; on one that does not, it makes one. Either
// way the new Held has the token the lease has now.
func TestKeepHeldTransferToken(t *testing.T) {
	for _, tc := range []struct {
		name string
		wrap func(*acquireCounter, *inmem.Backend) lease.Provider
		want int64
	}{
		{"TokenTransferer", func(c *acquireCounter, b *inmem.Backend) lease.Provider { return tokenCounter{c, b} }, 0},
		{"TransferLeaseOnly", func(c *acquireCounter, _ *inmem.Backend) lease.Provider { return c }, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := t.Context()
				b := bubbleBackend(t)
				c := &acquireCounter{Provider: b}
				p := tc.wrap(c, b)
				if _, ok := p.(lease.TokenTransferer); ok != (tc.want == 0) {
					t.Fatalf("%T implements TokenTransferer: %v", p, ok)
				}
				h, err := lease.Keep(ctx, p, "k", "a", ttl)
				if err != nil {
					t.Fatal(err)
				}
				before := c.acquires.Load()
				h2, err := h.Transfer(ctx, "b")
				if err != nil {
					t.Fatal(err)
				}
				if n := c.acquires.Load() - before; n != tc.want {
					t.Errorf("Transfer made %d AcquireLease calls, want %d", n, tc.want)
				}
				info, err := b.InspectLease(ctx, "k")
				if err != nil {
					t.Fatal(err)
				}
				if info.Owner != "b" || h2.Token() != info.Token || h2.Token() <= h.Token() {
					t.Fatalf("new Held %s token %d, lease %+v; want b with the lease's token, above %d", h2.Owner(), h2.Token(), info, h.Token())
				}
				if err := h2.Release(ctx); err != nil {
					t.Fatal(err)
				}
			})
		})
	}
}

// slowTokens is a TokenTransferer whose transfers take d (fake time).
type slowTokens struct {
	lease.Provider
	tt lease.TokenTransferer
	d  time.Duration
}

func (s slowTokens) TransferLeaseToken(ctx context.Context, key, from, to string, ttl time.Duration) (uint64, error) {
	time.Sleep(s.d)
	return s.tt.TransferLeaseToken(ctx, key, from, to, ttl)
}

// TestKeepHeldTransferTokenDeadline: a Held made by a transfer on a
// TokenTransferer counts its loss deadline from the transfer call's start
// (lease/doc.go, "Fail-closed"): the TTL minus its tenth after the call
// began, not after it returned, however long the call took.
func TestKeepHeldTransferTokenDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		b := bubbleBackend(t)
		p := slowTokens{Provider: b, tt: b, d: ttl / 4}
		h, err := lease.Keep(ctx, p, "k", "a", ttl)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		h2, err := h.Transfer(ctx, "b")
		if err != nil {
			t.Fatal(err)
		}
		if got, want := h2.Deadline(), start.Add(ttl-ttl/10); !got.Equal(want) {
			t.Fatalf("deadline %v after the transfer began, want %v", got.Sub(start), want.Sub(start))
		}
		if err := h2.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}
