package leasetest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/leasebus/leasebus/lease"
)

// DefaultTTL is the base TTL of the suite when Config.TTL is zero. It suits a
// backend on real time (a local Redis); with a fake clock any TTL works.
const DefaultTTL = 200 * time.Millisecond

// Config describes the provider under test.
type Config struct {
	// New returns a fresh provider for one subtest. It is called once per
	// subtest and should register its own cleanup (t.Cleanup) to close what
	// it opened. The ClosedReturnsErrClosed subtest closes the provider it
	// gets through io.Closer, which the provider must implement.
	New func(t *testing.T) lease.Provider
	// Advance moves the provider's lease clock forward by d. Default (nil):
	// time.Sleep(d), for backends on real time. The suite never sleeps
	// otherwise.
	Advance func(t *testing.T, p lease.Provider, d time.Duration)
	// TTL is the base TTL of the suite. Default: DefaultTTL. Expiry is
	// reached by advancing 1.5 TTL, so on real time it sets how long the
	// suite runs. Checks that a lease is still live leave at least one TTL
	// of slack, so that a late wake-up on a loaded machine does not fail
	// them; subtests that must not see expiry at all use 60 TTL.
	TTL time.Duration
}

// Run runs the conformance suite against the provider c.New makes: one
// subtest per rule of the lease contract. Keys are unique to the run and to
// the subtest, so a shared backend (one Redis database) may be used.
func Run(t *testing.T, c Config) {
	t.Helper()
	if c.New == nil {
		t.Fatal("leasetest: Config.New is nil")
	}
	if c.TTL == 0 {
		c.TTL = DefaultTTL
	}
	if c.TTL < 4*time.Millisecond {
		t.Fatalf("leasetest: Config.TTL %v is below 4ms", c.TTL)
	}
	run := uuid.NewString()[:8]
	for _, tc := range []struct {
		name string
		f    func(e *env)
	}{
		{"AcquireFreeWins", testAcquireFreeWins},
		{"AcquireHeldLosesNamesHolder", testAcquireHeldLosesNamesHolder},
		{"ReacquireByHolderRefreshesSameToken", testReacquireByHolderRefreshesSameToken},
		{"AcquireExpiredWins", testAcquireExpiredWins},
		{"TokensIncreaseAcrossExpiryReleaseTransfer", testTokensIncrease},
		{"RenewExtendsLiveLease", testRenewExtendsLiveLease},
		{"RenewNeverRecreatesExpired", testRenewNeverRecreatesExpired},
		{"RenewByOtherFails", testRenewByOtherFails},
		{"ReleaseOnlyByHolder", testReleaseOnlyByHolder},
		{"StaleOwnerNeverClobbersNewHolder", testStaleOwnerNeverClobbers},
		{"TransferAtomicNeverFree", testTransferAtomicNeverFree},
		{"TransferFailsWhenNotHeld", testTransferFailsWhenNotHeld},
		{"TransferGivesNewTokenFullTTL", testTransferGivesNewTokenFullTTL},
		{"ConcurrentAcquirers100ExactlyOneWins", testConcurrentAcquirers},
		{"GetLeaseOwnerEmptyWhenFree", testGetLeaseOwnerEmptyWhenFree},
		{"InvalidInput", testInvalidInput},
		{"ClosedReturnsErrClosed", testClosed},
		{"Inspector", testInspector},
		{"BatchRenewer", testBatchRenewer},
		{"TokenTransferer", testTokenTransferer},
		{"TokenReleaser", testTokenReleaser},
		{"NeverReturningCallCannotKeepHeldAlive", testNeverReturningCall},
		{"Revoker", testRevoker}, // revoke.go
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := c.New(t)
			if p == nil {
				t.Fatal("leasetest: Config.New returned nil")
			}
			tc.f(&env{t: t, c: c, p: p, ttl: c.TTL, long: 60 * c.TTL, ctx: t.Context(), run: run})
		})
	}
}

// env is one subtest's view of the provider, with helpers that fail the test
// on an unexpected error.
type env struct {
	t         *testing.T
	c         Config
	p         lease.Provider
	ttl, long time.Duration
	ctx       context.Context
	run       string
}

// key returns a key unique to the run, the subtest and name.
func (e *env) key(name string) string {
	return "leasetest:" + e.run + ":" + e.t.Name() + ":" + name
}

func (e *env) advance(d time.Duration) {
	e.t.Helper()
	if e.c.Advance == nil {
		time.Sleep(d)
		return
	}
	e.c.Advance(e.t, e.p, d)
}

// expire advances past the base TTL.
func (e *env) expire() { e.t.Helper(); e.advance(e.ttl * 3 / 2) }

func (e *env) acquire(key, owner string, ttl time.Duration) lease.Result {
	e.t.Helper()
	r, err := e.p.AcquireLease(e.ctx, key, owner, ttl)
	if err != nil {
		e.t.Fatalf("AcquireLease(%q, %q, %v): %v", key, owner, ttl, err)
	}
	return r
}

func (e *env) mustAcquire(key, owner string, ttl time.Duration) lease.Result {
	e.t.Helper()
	r := e.acquire(key, owner, ttl)
	if !r.Acquired || r.Owner != owner {
		e.t.Fatalf("AcquireLease(%q, %q) = %+v, want acquired by %s", key, owner, r, owner)
	}
	return r
}

// observe reads the holder of a key that must be held, without changing it:
// an acquire by an owner nobody else uses loses and names the holder.
func (e *env) observe(key string) lease.Result {
	e.t.Helper()
	r := e.acquire(key, "leasetest-observer", e.ttl)
	if r.Acquired {
		e.t.Fatalf("observer acquired %q: the key was free, want it held", key)
	}
	return r
}

func (e *env) owner(key string) string {
	e.t.Helper()
	o, err := e.p.GetLeaseOwner(e.ctx, key)
	if err != nil {
		e.t.Fatalf("GetLeaseOwner(%q): %v", key, err)
	}
	return o
}

func (e *env) wantOwner(key, want string) {
	e.t.Helper()
	if got := e.owner(key); got != want {
		e.t.Fatalf("GetLeaseOwner(%q) = %q, want %q", key, got, want)
	}
}

func (e *env) renew(key, owner string, ttl time.Duration) bool {
	e.t.Helper()
	ok, err := e.p.RenewLease(e.ctx, key, owner, ttl)
	if err != nil {
		e.t.Fatalf("RenewLease(%q, %q, %v): %v", key, owner, ttl, err)
	}
	return ok
}

func (e *env) release(key, owner string) {
	e.t.Helper()
	if err := e.p.ReleaseLease(e.ctx, key, owner); err != nil {
		e.t.Fatalf("ReleaseLease(%q, %q): %v", key, owner, err)
	}
}

func (e *env) transfer(key, from, to string, ttl time.Duration) bool {
	e.t.Helper()
	ok, err := e.p.TransferLease(e.ctx, key, from, to, ttl)
	if err != nil {
		e.t.Fatalf("TransferLease(%q, %q, %q, %v): %v", key, from, to, ttl, err)
	}
	return ok
}

func (e *env) wantTTL(what string, got, lo, hi time.Duration) {
	e.t.Helper()
	if got <= lo || got > hi {
		e.t.Fatalf("%s TTL = %v, want in (%v, %v]", what, got, lo, hi)
	}
}

func testAcquireFreeWins(e *env) {
	k := e.key("k")
	r := e.mustAcquire(k, "a", e.ttl)
	e.wantTTL("winner's", r.TTL, 0, e.ttl)
	e.wantOwner(k, "a")
}

func testAcquireHeldLosesNamesHolder(e *env) {
	k := e.key("k")
	ra := e.mustAcquire(k, "a", e.long)
	r := e.acquire(k, "b", e.ttl)
	if r.Acquired {
		e.t.Fatalf("second owner acquired a held key: %+v", r)
	}
	if r.Owner != "a" || r.Token != ra.Token {
		e.t.Fatalf("loser's Result = %+v, want Owner a, Token %d", r, ra.Token)
	}
	e.wantTTL("loser's", r.TTL, 0, e.long)
	if msg := lease.NewHeldError(k, r).Error(); !strings.Contains(msg, "held by a") {
		e.t.Fatalf("HeldError = %q, want it to name the holder", msg)
	}
	e.wantOwner(k, "a")
}

func testReacquireByHolderRefreshesSameToken(e *env) {
	k := e.key("k")
	r1 := e.mustAcquire(k, "a", 2*e.ttl)
	e.advance(e.ttl)
	r2 := e.mustAcquire(k, "a", 4*e.ttl)
	if r2.Token != r1.Token {
		e.t.Fatalf("re-acquire token = %d, want the same tenure's %d", r2.Token, r1.Token)
	}
	e.wantTTL("re-acquire's", r2.TTL, 3*e.ttl, 4*e.ttl)
	e.wantTTL("observed", e.observe(k).TTL, 3*e.ttl, 4*e.ttl)
	e.advance(2 * e.ttl) // past the first expiry, within the refreshed one
	if obs := e.observe(k); obs.Owner != "a" || obs.Token != r1.Token {
		e.t.Fatalf("after the first TTL holder = %+v, want a with token %d", obs, r1.Token)
	}
}

func testAcquireExpiredWins(e *env) {
	k := e.key("k")
	ra := e.mustAcquire(k, "a", e.ttl)
	e.expire()
	rb := e.mustAcquire(k, "b", e.long)
	if rb.Token <= ra.Token {
		e.t.Fatalf("token after expiry = %d, want > %d", rb.Token, ra.Token)
	}
	e.wantOwner(k, "b")
}

func testTokensIncrease(e *env) {
	k := e.key("k")
	var tokens []uint64
	step := func(what string, tok uint64) {
		e.t.Helper()
		if n := len(tokens); n > 0 && tok <= tokens[n-1] {
			e.t.Fatalf("token after %s = %d, want > %d (tokens so far %v)", what, tok, tokens[n-1], tokens)
		}
		tokens = append(tokens, tok)
	}
	step("first acquire", e.mustAcquire(k, "a", e.ttl).Token)
	e.release(k, "a")
	step("release", e.mustAcquire(k, "b", e.ttl).Token)
	e.expire()
	step("expiry", e.mustAcquire(k, "c", e.long).Token)
	if !e.transfer(k, "c", "d", e.long) {
		e.t.Fatal("transfer c→d = false, want true")
	}
	obs := e.observe(k)
	if obs.Owner != "d" {
		e.t.Fatalf("holder after transfer = %q, want d", obs.Owner)
	}
	step("transfer", obs.Token)
	if r := e.mustAcquire(k, "d", e.long); r.Token != obs.Token {
		e.t.Fatalf("re-acquire by d token = %d, want %d", r.Token, obs.Token)
	}
	e.release(k, "d")
	step("release after transfer", e.mustAcquire(k, "a", e.ttl).Token)
}

func testRenewExtendsLiveLease(e *env) {
	k := e.key("k")
	ra := e.mustAcquire(k, "a", 2*e.ttl)
	e.advance(e.ttl)
	if !e.renew(k, "a", 4*e.ttl) {
		e.t.Fatal("renew of a live lease by its holder = false, want true")
	}
	e.wantTTL("renewed", e.observe(k).TTL, 3*e.ttl, 4*e.ttl)
	e.advance(2 * e.ttl) // past the first expiry, within the renewed one
	obs := e.observe(k)
	if obs.Owner != "a" || obs.Token != ra.Token {
		e.t.Fatalf("after renewals holder = %+v, want a with token %d", obs, ra.Token)
	}
}

func testRenewNeverRecreatesExpired(e *env) {
	k := e.key("k")
	if e.renew(e.key("never"), "a", e.ttl) {
		e.t.Fatal("renew of a never-acquired key = true, want false")
	}
	e.wantOwner(e.key("never"), "")
	e.mustAcquire(k, "a", e.ttl)
	e.expire()
	if e.renew(k, "a", e.ttl) {
		e.t.Fatal("renew of an expired lease = true, want false")
	}
	e.wantOwner(k, "")
}

func testRenewByOtherFails(e *env) {
	k := e.key("k")
	ra := e.mustAcquire(k, "a", e.long)
	if e.renew(k, "b", e.ttl) {
		e.t.Fatal("renew by a non-holder = true, want false")
	}
	obs := e.observe(k)
	if obs.Owner != "a" || obs.Token != ra.Token {
		e.t.Fatalf("holder after a foreign renew = %+v, want a with token %d", obs, ra.Token)
	}
	e.wantTTL("holder's", obs.TTL, e.ttl, e.long) // not shortened to the foreign ttl
}

func testReleaseOnlyByHolder(e *env) {
	k := e.key("k")
	e.release(e.key("never"), "a") // free key: no-op, nil
	e.mustAcquire(k, "a", e.long)
	e.release(k, "b")
	e.wantOwner(k, "a")
	e.release(k, "a")
	e.wantOwner(k, "")
	e.release(k, "a") // again: no-op
	e.wantOwner(k, "")
}

func testStaleOwnerNeverClobbers(e *env) {
	k := e.key("k")
	e.mustAcquire(k, "a", e.ttl)
	e.expire()
	rb := e.mustAcquire(k, "b", e.long)
	e.release(k, "a")
	e.wantOwner(k, "b")
	if e.renew(k, "a", e.ttl) {
		e.t.Fatal("renew by the expired owner = true, want false")
	}
	if e.transfer(k, "a", "c", e.ttl) {
		e.t.Fatal("transfer by the expired owner = true, want false")
	}
	if r := e.acquire(k, "a", e.ttl); r.Acquired || r.Owner != "b" || r.Token != rb.Token {
		e.t.Fatalf("acquire by the expired owner = %+v, want lost to b with token %d", r, rb.Token)
	}
	obs := e.observe(k)
	if obs.Owner != "b" || obs.Token != rb.Token {
		e.t.Fatalf("holder = %+v, want b with token %d", obs, rb.Token)
	}
	e.wantTTL("new holder's", obs.TTL, e.ttl, e.long)
}

func testTransferAtomicNeverFree(e *env) {
	const transfers = 100
	k := e.key("k")
	e.mustAcquire(k, "x0", e.long)
	stop, started := make(chan struct{}), make(chan struct{})
	var (
		wg    sync.WaitGroup
		reads int
		bad   []string
	)
	wg.Go(func() {
		defer func() {
			if reads == 0 {
				close(started)
			}
		}()
		for {
			select {
			case <-stop:
				return
			default:
			}
			o, err := e.p.GetLeaseOwner(e.ctx, k)
			if reads++; reads == 1 {
				close(started)
			}
			switch {
			case err != nil:
				bad = append(bad, "error: "+err.Error())
			case o != "x0" && o != "x1":
				bad = append(bad, fmt.Sprintf("owner %q", o))
			}
			if len(bad) > 10 {
				return
			}
		}
	})
	<-started // the reader polls before, during and after the transfers
	from, to := "x0", "x1"
	for i := range transfers {
		ok, err := e.p.TransferLease(e.ctx, k, from, to, e.long)
		if err != nil || !ok {
			close(stop)
			wg.Wait()
			e.t.Fatalf("transfer %d %s→%s = %v, %v; want true", i, from, to, ok, err)
		}
		from, to = to, from
	}
	close(stop)
	wg.Wait()
	if len(bad) > 0 {
		e.t.Fatalf("a reader polling during %d transfers saw %v (want only x0 or x1, never a free key)", transfers, bad)
	}
	e.wantOwner(k, from)
}

func testTransferFailsWhenNotHeld(e *env) {
	free := e.key("free")
	if e.transfer(free, "a", "b", e.ttl) {
		e.t.Fatal("transfer of a free key = true, want false")
	}
	e.wantOwner(free, "")

	other := e.key("other")
	rc := e.mustAcquire(other, "c", e.long)
	if e.transfer(other, "a", "b", e.ttl) {
		e.t.Fatal("transfer by a non-holder = true, want false")
	}
	if obs := e.observe(other); obs.Owner != "c" || obs.Token != rc.Token {
		e.t.Fatalf("holder after a refused transfer = %+v, want c with token %d", obs, rc.Token)
	}

	expired := e.key("expired")
	e.mustAcquire(expired, "a", e.ttl)
	e.expire()
	if e.transfer(expired, "a", "b", e.ttl) {
		e.t.Fatal("transfer of an expired lease = true, want false")
	}
	e.wantOwner(expired, "")
}

func testTransferGivesNewTokenFullTTL(e *env) {
	k := e.key("k")
	ra := e.mustAcquire(k, "a", 2*e.ttl)
	e.advance(e.ttl)
	if !e.transfer(k, "a", "b", 4*e.ttl) {
		e.t.Fatal("transfer a→b = false, want true")
	}
	obs := e.observe(k)
	if obs.Owner != "b" || obs.Token <= ra.Token {
		e.t.Fatalf("after transfer holder = %+v, want b with a token > %d", obs, ra.Token)
	}
	e.wantTTL("transferred", obs.TTL, 3*e.ttl, 4*e.ttl)
	e.advance(2 * e.ttl) // past a's own expiry, within b's full TTL
	e.wantOwner(k, "b")
	if e.renew(k, "a", e.ttl) {
		e.t.Fatal("renew by the old owner after transfer = true, want false")
	}
	e.release(k, "a")
	e.wantOwner(k, "b")
}

func testConcurrentAcquirers(e *env) {
	const n = 100
	k := e.key("k")
	results := make([]lease.Result, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			results[i], errs[i] = e.p.AcquireLease(e.ctx, k, fmt.Sprintf("owner-%d", i), e.long)
		})
	}
	close(start)
	wg.Wait()
	winner := -1
	for i, r := range results {
		if errs[i] != nil {
			e.t.Fatalf("acquirer %d: %v", i, errs[i])
		}
		if r.Acquired {
			if winner >= 0 {
				e.t.Fatalf("acquirers %d and %d both won", winner, i)
			}
			winner = i
		}
	}
	if winner < 0 {
		e.t.Fatal("no acquirer won a free key")
	}
	w := results[winner]
	for i, r := range results {
		if i != winner && (r.Owner != w.Owner || r.Token != w.Token) {
			e.t.Fatalf("loser %d saw %+v, want holder %s with token %d", i, r, w.Owner, w.Token)
		}
	}
	e.wantOwner(k, w.Owner)
}

func testGetLeaseOwnerEmptyWhenFree(e *env) {
	k := e.key("k")
	e.wantOwner(k, "")
	e.mustAcquire(k, "a", e.ttl)
	e.release(k, "a")
	e.wantOwner(k, "")
	e.mustAcquire(k, "a", e.ttl)
	e.expire()
	e.wantOwner(k, "")
}

func testInvalidInput(e *env) {
	k := e.key("k")
	ctx, p := e.ctx, e.p
	acquire := func(key, owner string, ttl time.Duration) error {
		r, err := p.AcquireLease(ctx, key, owner, ttl)
		if r.Acquired {
			return fmt.Errorf("acquired (%+v) with error %v", r, err)
		}
		return err
	}
	renew := func(key, owner string, ttl time.Duration) error {
		ok, err := p.RenewLease(ctx, key, owner, ttl)
		if ok {
			return fmt.Errorf("renewed with error %v", err)
		}
		return err
	}
	transfer := func(key, from, to string, ttl time.Duration) error {
		ok, err := p.TransferLease(ctx, key, from, to, ttl)
		if ok {
			return fmt.Errorf("transferred with error %v", err)
		}
		return err
	}
	for _, tc := range []struct {
		name, field string
		call        func() error
	}{
		{"AcquireEmptyKey", "key", func() error { return acquire("", "a", e.ttl) }},
		{"AcquireEmptyOwner", "owner", func() error { return acquire(k, "", e.ttl) }},
		{"AcquireZeroTTL", "ttl", func() error { return acquire(k, "a", 0) }},
		{"AcquireNegativeTTL", "ttl", func() error { return acquire(k, "a", -1) }},
		{"GetLeaseOwnerEmptyKey", "key", func() error { _, err := p.GetLeaseOwner(ctx, ""); return err }},
		{"ReleaseEmptyKey", "key", func() error { return p.ReleaseLease(ctx, "", "a") }},
		{"ReleaseEmptyOwner", "owner", func() error { return p.ReleaseLease(ctx, k, "") }},
		{"RenewEmptyKey", "key", func() error { return renew("", "a", e.ttl) }},
		{"RenewEmptyOwner", "owner", func() error { return renew(k, "", e.ttl) }},
		{"RenewZeroTTL", "ttl", func() error { return renew(k, "a", 0) }},
		{"RenewNegativeTTL", "ttl", func() error { return renew(k, "a", -1) }},
		{"TransferEmptyKey", "key", func() error { return transfer("", "a", "b", e.ttl) }},
		{"TransferEmptyFromOwner", "fromOwner", func() error { return transfer(k, "", "b", e.ttl) }},
		{"TransferEmptyToOwner", "toOwner", func() error { return transfer(k, "a", "", e.ttl) }},
		{"TransferFromEqualsTo", "toOwner", func() error { return transfer(k, "a", "a", e.ttl) }},
		{"TransferZeroTTL", "ttl", func() error { return transfer(k, "a", "b", 0) }},
		{"TransferNegativeTTL", "ttl", func() error { return transfer(k, "a", "b", -1) }},
	} {
		e.t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if !errors.Is(err, lease.ErrInvalid) {
				t.Fatalf("error = %v, want one wrapping lease.ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("error %q does not name the field %s", err, tc.field)
			}
		})
	}
	// The owner "a" of the rejected calls must not hold the key, and the
	// key must not be held at all.
	e.wantOwner(k, "")
}

func testClosed(e *env) {
	k := e.key("k")
	e.mustAcquire(k, "a", e.long)
	c, ok := e.p.(io.Closer)
	if !ok {
		e.t.Fatalf("provider %T is not an io.Closer; this subtest closes the provider through io.Closer", e.p)
	}
	if err := c.Close(); err != nil {
		e.t.Fatalf("Close: %v", err)
	}
	if err := c.Close(); err != nil {
		e.t.Fatalf("second Close = %v, want nil (idempotent)", err)
	}
	ctx, p := e.ctx, e.p
	calls := []struct {
		name string
		call func() error
	}{
		{"AcquireLease", func() error {
			r, err := p.AcquireLease(ctx, k, "b", e.ttl)
			if r.Acquired {
				return fmt.Errorf("acquired after Close: %+v, %v", r, err)
			}
			return err
		}},
		{"GetLeaseOwner", func() error { _, err := p.GetLeaseOwner(ctx, k); return err }},
		{"ReleaseLease", func() error { return p.ReleaseLease(ctx, k, "a") }},
		{"RenewLease", func() error { _, err := p.RenewLease(ctx, k, "a", e.ttl); return err }},
		{"TransferLease", func() error { _, err := p.TransferLease(ctx, k, "a", "b", e.ttl); return err }},
	}
	if in, ok := p.(lease.Inspector); ok {
		calls = append(calls,
			struct {
				name string
				call func() error
			}{"InspectLease", func() error { _, err := in.InspectLease(ctx, k); return err }},
			struct {
				name string
				call func() error
			}{"ListLeases", func() error { _, err := in.ListLeases(ctx, ""); return err }})
	}
	if br, ok := p.(lease.BatchRenewer); ok {
		calls = append(calls, struct {
			name string
			call func() error
		}{"RenewLeases", func() error {
			_, err := br.RenewLeases(ctx, []lease.Renewal{{Key: k, Owner: "a", TTL: e.ttl}})
			return err
		}})
	}
	for _, c := range calls {
		if err := c.call(); !errors.Is(err, lease.ErrClosed) {
			e.t.Errorf("%s after Close = %v, want lease.ErrClosed", c.name, err)
		}
	}
}

func testInspector(e *env) {
	in, ok := e.p.(lease.Inspector)
	if !ok {
		e.t.Skipf("provider %T does not implement lease.Inspector", e.p)
	}
	prefix := e.key("") + "/"
	held, other, free := prefix+"held", prefix+"other", prefix+"free"
	expired, released := prefix+"expired", prefix+"released"
	outside := e.key("outside")

	e.mustAcquire(expired, "a", e.ttl)
	e.expire()
	ra := e.mustAcquire(held, "a", e.long)
	rb := e.mustAcquire(other, "b", e.long)
	e.mustAcquire(released, "a", e.long)
	e.release(released, "a")
	e.mustAcquire(outside, "a", e.long)

	info, err := in.InspectLease(e.ctx, held)
	if err != nil {
		e.t.Fatalf("InspectLease(%q): %v", held, err)
	}
	if info.Key != held || info.Owner != "a" || info.Token != ra.Token {
		e.t.Fatalf("InspectLease(held) = %+v, want key %q, owner a, token %d", info, held, ra.Token)
	}
	e.wantTTL("inspected", info.TTL, 0, e.long)
	for _, k := range []string{free, expired, released} {
		info, err := in.InspectLease(e.ctx, k)
		if err != nil {
			e.t.Fatalf("InspectLease(%q): %v", k, err)
		}
		if info != (lease.Info{Key: k}) {
			e.t.Fatalf("InspectLease(%q) = %+v, want only the key set (no live lease)", k, info)
		}
	}

	list, err := in.ListLeases(e.ctx, prefix)
	if err != nil {
		e.t.Fatalf("ListLeases(%q): %v", prefix, err)
	}
	slices.SortFunc(list, func(a, b lease.Info) int { return strings.Compare(a.Key, b.Key) })
	if len(list) != 2 || list[0].Key != held || list[1].Key != other {
		e.t.Fatalf("ListLeases(prefix) = %+v, want exactly %q and %q", list, held, other)
	}
	if list[0].Owner != "a" || list[0].Token != ra.Token || list[1].Owner != "b" || list[1].Token != rb.Token {
		e.t.Fatalf("ListLeases(prefix) = %+v, want owners a, b with tokens %d, %d", list, ra.Token, rb.Token)
	}
	for _, i := range list {
		e.wantTTL("listed", i.TTL, 0, e.long)
	}

	all, err := in.ListLeases(e.ctx, "")
	if err != nil {
		e.t.Fatalf("ListLeases(\"\"): %v", err)
	}
	var keys []string
	for _, i := range all {
		keys = append(keys, i.Key)
	}
	for _, k := range []string{held, other, outside} {
		if !slices.Contains(keys, k) {
			e.t.Fatalf("ListLeases(\"\") lacks %q", k)
		}
	}
	for _, k := range []string{free, expired, released} {
		if slices.Contains(keys, k) {
			e.t.Fatalf("ListLeases(\"\") lists %q, which has no live lease", k)
		}
	}
}

// testTokenTransferer: TransferLeaseToken reports the token the new owner
// holds (as an AcquireLease by it reads it), above the old owner's; 0 and no
// change when the old owner does not hold the lease.
func testTokenTransferer(e *env) {
	tt, ok := e.p.(lease.TokenTransferer)
	if !ok {
		e.t.Skipf("provider %T does not implement lease.TokenTransferer", e.p)
	}
	k := e.key("k")
	ra := e.mustAcquire(k, "a", 2*e.ttl)
	tok, err := tt.TransferLeaseToken(e.ctx, k, "a", "b", 2*e.ttl)
	if err != nil {
		e.t.Fatalf("TransferLeaseToken a→b: %v", err)
	}
	if tok <= ra.Token {
		e.t.Fatalf("TransferLeaseToken a→b = %d, want a token above a's %d", tok, ra.Token)
	}
	if rb := e.mustAcquire(k, "b", 2*e.ttl); rb.Token != tok {
		e.t.Fatalf("b's token read back = %d, TransferLeaseToken said %d", rb.Token, tok)
	}
	if tok2, err := tt.TransferLeaseToken(e.ctx, k, "a", "c", 2*e.ttl); err != nil || tok2 != 0 {
		e.t.Fatalf("TransferLeaseToken by the old owner = %d, %v; want 0, nil", tok2, err)
	}
	e.wantOwner(k, "b")
	if tok3, err := tt.TransferLeaseToken(e.ctx, e.key("free"), "a", "b", e.ttl); err != nil || tok3 != 0 {
		e.t.Fatalf("TransferLeaseToken of a free key = %d, %v; want 0, nil", tok3, err)
	}
	if _, err := tt.TransferLeaseToken(e.ctx, k, "b", "", e.ttl); !errors.Is(err, lease.ErrInvalid) {
		e.t.Fatalf("TransferLeaseToken to an empty owner: %v, want ErrInvalid", err)
	}
}

// testTokenReleaser: ReleaseLeaseToken releases only the tenure of its
// token: a release for an owner's earlier tenure leaves its later one alone.
func testTokenReleaser(e *env) {
	tr, ok := e.p.(lease.TokenReleaser)
	if !ok {
		e.t.Skipf("provider %T does not implement lease.TokenReleaser", e.p)
	}
	k := e.key("k")
	r1 := e.mustAcquire(k, "a", 2*e.ttl)
	e.release(k, "a")
	r2 := e.mustAcquire(k, "a", 2*e.ttl)
	if err := tr.ReleaseLeaseToken(e.ctx, k, "a", r1.Token); err != nil {
		e.t.Fatalf("ReleaseLeaseToken of an earlier tenure: %v", err)
	}
	e.wantOwner(k, "a")
	if err := tr.ReleaseLeaseToken(e.ctx, k, "b", r2.Token); err != nil {
		e.t.Fatalf("ReleaseLeaseToken by another owner: %v", err)
	}
	e.wantOwner(k, "a")
	if err := tr.ReleaseLeaseToken(e.ctx, k, "a", r2.Token); err != nil {
		e.t.Fatalf("ReleaseLeaseToken of the live tenure: %v", err)
	}
	e.wantOwner(k, "")
	if err := tr.ReleaseLeaseToken(e.ctx, k, "a", 0); !errors.Is(err, lease.ErrInvalid) {
		e.t.Fatalf("ReleaseLeaseToken with token 0: %v, want ErrInvalid", err)
	}
}

func testBatchRenewer(e *env) {
	br, ok := e.p.(lease.BatchRenewer)
	if !ok {
		e.t.Skipf("provider %T does not implement lease.BatchRenewer", e.p)
	}
	held, other, expired, free := e.key("held"), e.key("other"), e.key("expired"), e.key("free")
	e.mustAcquire(expired, "a", e.ttl)
	e.expire()
	ra := e.mustAcquire(held, "a", 2*e.ttl)
	e.mustAcquire(other, "b", 2*e.ttl)
	e.advance(e.ttl)

	if got, err := br.RenewLeases(e.ctx, nil); err != nil || len(got) != 0 {
		e.t.Fatalf("RenewLeases(nil) = %v, %v; want no results and nil", got, err)
	}
	reqs := []lease.Renewal{
		{Key: held, Owner: "a", TTL: 4 * e.ttl},
		{Key: other, Owner: "a", TTL: 4 * e.ttl},
		{Key: expired, Owner: "a", TTL: 4 * e.ttl},
		{Key: free, Owner: "a", TTL: 4 * e.ttl},
	}
	got, err := br.RenewLeases(e.ctx, reqs)
	if err != nil {
		e.t.Fatalf("RenewLeases: %v", err)
	}
	if want := []bool{true, false, false, false}; !slices.Equal(got, want) {
		e.t.Fatalf("RenewLeases(held, other's, expired, free) = %v, want %v", got, want)
	}
	e.wantOwner(expired, "")
	e.wantOwner(free, "")
	e.advance(2 * e.ttl) // past the acquires' expiry, within the renewal
	if obs := e.observe(held); obs.Owner != "a" || obs.Token != ra.Token {
		e.t.Fatalf("renewed lease = %+v, want still a's with token %d", obs, ra.Token)
	}
	e.wantOwner(other, "") // renewing it for a non-holder did not extend it

	bad := []lease.Renewal{{Key: held, Owner: "a", TTL: e.ttl}, {Key: held, Owner: "", TTL: e.ttl}}
	if _, err := br.RenewLeases(e.ctx, bad); !errors.Is(err, lease.ErrInvalid) || !strings.Contains(err.Error(), "owner") {
		e.t.Fatalf("RenewLeases with an empty owner = %v, want an error wrapping lease.ErrInvalid naming owner", err)
	}
}
