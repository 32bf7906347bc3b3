package leasetest

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/leasebus/leasebus/lease"
)

// testRevoker checks the optional lease.Revoker capability, one subtest per
// rule, each on a fresh provider.
func testRevoker(e *env) {
	if _, ok := e.p.(lease.Revoker); !ok {
		e.t.Skipf("provider %T does not implement lease.Revoker", e.p)
	}
	for _, tc := range []struct {
		name string
		f    func(e *env, rv lease.Revoker)
	}{
		{"HolderRenewFailsWithReason", testRevokeRenewFails},
		{"KeyStaysHeldUntilRelease", testRevokeHeldUntilRelease},
		{"KeyFreeAfterExpiryStaleHolderHarmless", testRevokeFreeAfterExpiry},
		{"ForceFreesAtOnce", testRevokeForce},
		{"Status", testRevokeStatus},
		{"IdempotentAndNeedsLiveLease", testRevokeIdempotent},
		{"InvalidInput", testRevokeInvalid},
		{"BatchRenewalNotRenewed", testRevokeBatch},
		{"Closed", testRevokeClosed},
		{"TokenRevoker", testTokenRevoker},
	} {
		e.t.Run(tc.name, func(t *testing.T) {
			p := e.c.New(t)
			if p == nil {
				t.Fatal("leasetest: Config.New returned nil")
			}
			rv, ok := p.(lease.Revoker)
			if !ok {
				t.Fatalf("a second provider of Config.New (%T) does not implement lease.Revoker", p)
			}
			tc.f(&env{t: t, c: e.c, p: p, ttl: e.ttl, long: e.long, ctx: t.Context(), run: e.run}, rv)
		})
	}
}

func (e *env) revoke(rv lease.Revoker, key, reason string) {
	e.t.Helper()
	if err := rv.RevokeLease(e.ctx, key, reason); err != nil {
		e.t.Fatalf("RevokeLease(%q, %q): %v", key, reason, err)
	}
}

func (e *env) state(rv lease.Revoker, key string) lease.State {
	e.t.Helper()
	s, err := rv.LeaseState(e.ctx, key)
	if err != nil {
		e.t.Fatalf("LeaseState(%q): %v", key, err)
	}
	if s.Key != key {
		e.t.Fatalf("LeaseState(%q).Key = %q", key, s.Key)
	}
	return s
}

// wantRevokedErr fails unless err is a *lease.RevokedError of key and owner
// with reason, matching lease.ErrRevoked.
func (e *env) wantRevokedErr(what string, err error, key, owner, reason string) {
	e.t.Helper()
	if !errors.Is(err, lease.ErrRevoked) {
		e.t.Fatalf("%s: error %v, want one matching lease.ErrRevoked", what, err)
	}
	var re *lease.RevokedError
	if !errors.As(err, &re) || re.Key != key || re.Owner != owner || re.Reason != reason {
		e.t.Fatalf("%s: error %#v, want a *lease.RevokedError{Key: %q, Owner: %q, Reason: %q}", what, err, key, owner, reason)
	}
	if !strings.Contains(err.Error(), reason) {
		e.t.Fatalf("%s: message %q does not carry the reason %q", what, err, reason)
	}
}

// wantNotTouched checks that the stale owner's renew, transfer and release
// (each may report false or a revoked error) leave holder's tenure as it is.
func (e *env) wantNotTouched(k, stale string, holder lease.Result) {
	e.t.Helper()
	if ok, err := e.p.RenewLease(e.ctx, k, stale, e.ttl); ok || (err != nil && !errors.Is(err, lease.ErrRevoked)) {
		e.t.Fatalf("renew by the revoked owner after %s took the key = %v, %v; want false or ErrRevoked", holder.Owner, ok, err)
	}
	if ok, err := e.p.TransferLease(e.ctx, k, stale, "thief", e.ttl); ok || (err != nil && !errors.Is(err, lease.ErrRevoked)) {
		e.t.Fatalf("transfer by the revoked owner = %v, %v; want false or ErrRevoked", ok, err)
	}
	if err := e.p.ReleaseLease(e.ctx, k, stale); err != nil {
		e.t.Fatalf("release by the revoked owner: %v", err)
	}
	obs := e.observe(k)
	if obs.Owner != holder.Owner || obs.Token != holder.Token {
		e.t.Fatalf("holder after the revoked owner's calls = %+v, want %s with token %d", obs, holder.Owner, holder.Token)
	}
	e.wantTTL("new holder's", obs.TTL, e.ttl, e.long) // not shortened to the stale renew's ttl
}

func testRevokeRenewFails(e *env, rv lease.Revoker) {
	k := e.key("k")
	ra := e.mustAcquire(k, "a", e.long)
	e.revoke(rv, k, "stuck since 03:00")
	ok, err := e.p.RenewLease(e.ctx, k, "a", e.long)
	if ok {
		e.t.Fatal("renew of a revoked lease = true, want false")
	}
	e.wantRevokedErr("RenewLease by the revoked holder", err, k, "a", "stuck since 03:00")
	r, err := e.p.AcquireLease(e.ctx, k, "a", e.long)
	if r.Acquired {
		e.t.Fatalf("re-acquire (refresh) of a revoked lease by its holder = %+v, want not acquired", r)
	}
	e.wantRevokedErr("AcquireLease by the revoked holder", err, k, "a", "stuck since 03:00")
	s := e.state(rv, k)
	if s.Status != lease.StatusRevoked || s.Owner != "a" || s.Token != ra.Token || s.Reason != "stuck since 03:00" || s.Forced || !s.Live() {
		e.t.Fatalf("LeaseState of a revoked, still held lease = %+v, want revoked, owner a, token %d, the reason, live", s, ra.Token)
	}
}

func testRevokeHeldUntilRelease(e *env, rv lease.Revoker) {
	k := e.key("k")
	ra := e.mustAcquire(k, "a", e.long)
	e.revoke(rv, k, "operator")
	// Not forced: nobody else may hold the key while a may still work.
	if r := e.acquire(k, "b", e.long); r.Acquired || r.Owner != "a" || r.Token != ra.Token {
		e.t.Fatalf("acquire by b of a revoked lease a still holds = %+v, want lost to a with token %d", r, ra.Token)
	}
	ok, err := e.p.TransferLease(e.ctx, k, "a", "c", e.long)
	if ok {
		e.t.Fatal("transfer of a revoked lease by its holder = true, want refused")
	}
	e.wantRevokedErr("TransferLease by the revoked holder", err, k, "a", "operator")
	e.wantOwner(k, "a")
	e.release(k, "a") // the holder stopped: the key is free
	e.wantOwner(k, "")
	rb := e.mustAcquire(k, "b", e.long)
	if rb.Token <= ra.Token {
		e.t.Fatalf("token after the revoked lease's release = %d, want > %d", rb.Token, ra.Token)
	}
	e.wantNotTouched(k, "a", rb)
	if s := e.state(rv, k); s.Status != lease.StatusActive || s.Owner != "b" || s.Token != rb.Token {
		e.t.Fatalf("LeaseState after b acquired = %+v, want active, owner b, token %d", s, rb.Token)
	}
}

func testRevokeFreeAfterExpiry(e *env, rv lease.Revoker) {
	k := e.key("k")
	ra := e.mustAcquire(k, "a", e.ttl)
	e.revoke(rv, k, "operator")
	if s := e.state(rv, k); s.Status != lease.StatusRevoked || s.TTL <= 0 || s.TTL > e.ttl {
		e.t.Fatalf("LeaseState right after the revoke = %+v, want revoked with at most the lease's TTL left", s)
	}
	e.expire() // the holder never released: the lease runs out
	e.wantOwner(k, "")
	if s := e.state(rv, k); s.Status != lease.StatusRevoked || s.Live() || s.Owner != "a" {
		e.t.Fatalf("LeaseState of a revoked lease that expired = %+v, want revoked, not live, owner a", s)
	}
	rb := e.mustAcquire(k, "b", e.long)
	if rb.Token <= ra.Token {
		e.t.Fatalf("token after the revoked lease expired = %d, want > %d", rb.Token, ra.Token)
	}
	e.wantNotTouched(k, "a", rb)
}

func testRevokeForce(e *env, rv lease.Revoker) {
	k := e.key("k")
	ra := e.mustAcquire(k, "a", e.long)
	if err := rv.ForceRevokeLease(e.ctx, k, "holder is dead"); err != nil {
		e.t.Fatalf("ForceRevokeLease: %v", err)
	}
	e.wantOwner(k, "") // free at once
	s := e.state(rv, k)
	if s.Status != lease.StatusRevoked || !s.Forced || s.Live() || s.Owner != "a" || s.Reason != "holder is dead" {
		e.t.Fatalf("LeaseState after a forced revoke = %+v, want revoked, forced, not live, owner a, the reason", s)
	}
	ok, err := e.p.RenewLease(e.ctx, k, "a", e.long)
	if ok {
		e.t.Fatal("renew after a forced revoke = true, want false")
	}
	e.wantRevokedErr("RenewLease by the force-revoked holder", err, k, "a", "holder is dead")
	rb := e.mustAcquire(k, "b", e.long)
	if rb.Token <= ra.Token {
		e.t.Fatalf("token after a forced revoke = %d, want > %d", rb.Token, ra.Token)
	}
	e.wantNotTouched(k, "a", rb)
}

func testRevokeStatus(e *env, rv lease.Revoker) {
	active, released, expired, revoked, free := e.key("active"), e.key("released"), e.key("expired"), e.key("revoked"), e.key("free")
	e.mustAcquire(expired, "x", e.ttl)
	e.expire()
	ra := e.mustAcquire(active, "a", e.long)
	rr := e.mustAcquire(released, "r", e.long)
	e.release(released, "r")
	e.mustAcquire(revoked, "v", e.long)
	e.revoke(rv, revoked, "why")
	e.release(revoked, "v")

	if s := e.state(rv, active); s.Status != lease.StatusActive || s.Owner != "a" || s.Token != ra.Token || !s.Live() || s.Reason != "" {
		e.t.Fatalf("LeaseState(active) = %+v, want active, owner a, token %d, live", s, ra.Token)
	}
	e.wantTTL("LeaseState(active)", e.state(rv, active).TTL, 0, e.long)
	if s := e.state(rv, released); s.Status != lease.StatusReleased || s.Owner != "r" || s.Token != rr.Token || s.Live() {
		e.t.Fatalf("LeaseState(released) = %+v, want released, owner r, token %d, not live", s, rr.Token)
	}
	if s := e.state(rv, expired); s.Status != lease.StatusExpired || s.Owner != "x" || s.Live() {
		e.t.Fatalf("LeaseState(expired) = %+v, want expired, owner x, not live", s)
	}
	if s := e.state(rv, revoked); s.Status != lease.StatusRevoked || s.Owner != "v" || s.Reason != "why" || s.Live() {
		e.t.Fatalf("LeaseState(revoked, then released) = %+v, want revoked (the revoke outranks the release), owner v, reason why", s)
	}
	if s := e.state(rv, free); s != (lease.State{Key: free}) {
		e.t.Fatalf("LeaseState(never held) = %+v, want StatusNone and only the key", s)
	}
}

func testRevokeIdempotent(e *env, rv lease.Revoker) {
	free := e.key("free")
	if err := rv.RevokeLease(e.ctx, free, "why"); !errors.Is(err, lease.ErrNotHeld) {
		e.t.Fatalf("RevokeLease of a free key = %v, want an error matching lease.ErrNotHeld", err)
	}
	if err := rv.ForceRevokeLease(e.ctx, free, "why"); !errors.Is(err, lease.ErrNotHeld) {
		e.t.Fatalf("ForceRevokeLease of a free key = %v, want an error matching lease.ErrNotHeld", err)
	}
	k := e.key("k")
	e.mustAcquire(k, "a", e.long)
	e.revoke(rv, k, "first")
	e.revoke(rv, k, "second") // again: nil, the first reason stays
	_, err := e.p.RenewLease(e.ctx, k, "a", e.long)
	e.wantRevokedErr("RenewLease after two revokes", err, k, "a", "first")
	// A forced revoke of a revoked lease frees it.
	if err := rv.ForceRevokeLease(e.ctx, k, "third"); err != nil {
		e.t.Fatalf("ForceRevokeLease of a revoked lease: %v", err)
	}
	e.wantOwner(k, "")
}

func testRevokeInvalid(e *env, rv lease.Revoker) {
	k := e.key("k")
	for _, tc := range []struct {
		name, field string
		call        func() error
	}{
		{"RevokeEmptyKey", "key", func() error { return rv.RevokeLease(e.ctx, "", "why") }},
		{"RevokeEmptyReason", "reason", func() error { return rv.RevokeLease(e.ctx, k, "") }},
		{"ForceEmptyKey", "key", func() error { return rv.ForceRevokeLease(e.ctx, "", "why") }},
		{"ForceEmptyReason", "reason", func() error { return rv.ForceRevokeLease(e.ctx, k, "") }},
		{"StateEmptyKey", "key", func() error { _, err := rv.LeaseState(e.ctx, ""); return err }},
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
}

func testRevokeBatch(e *env, rv lease.Revoker) {
	br, ok := e.p.(lease.BatchRenewer)
	if !ok {
		e.t.Skipf("provider %T does not implement lease.BatchRenewer", e.p)
	}
	revoked, held := e.key("revoked"), e.key("held")
	e.mustAcquire(revoked, "a", 2*e.ttl)
	e.mustAcquire(held, "a", 2*e.ttl)
	e.revoke(rv, revoked, "why")
	e.advance(e.ttl)
	got, err := br.RenewLeases(e.ctx, []lease.Renewal{{Key: revoked, Owner: "a", TTL: 4 * e.ttl}, {Key: held, Owner: "a", TTL: 4 * e.ttl}})
	// Either a plain false for the revoked request, or (better: Keep then
	// ends the Held with ErrRevoked) a *lease.BatchError naming it.
	if be, ok := errors.AsType[*lease.BatchError](err); ok {
		if len(be.Errs) != 2 || !errors.Is(be.Errs[0], lease.ErrRevoked) || be.Errs[1] != nil {
			e.t.Fatalf("RenewLeases(revoked, held) error = %v, want a BatchError with ErrRevoked for the revoked request only", err)
		}
	} else if err != nil {
		e.t.Fatalf("RenewLeases: %v", err)
	}
	if len(got) != 2 || got[0] || !got[1] {
		e.t.Fatalf("RenewLeases(revoked, held) = %v, want [false true]", got)
	}
	e.advance(2 * e.ttl) // past the revoked lease's expiry, within the renewal
	e.wantOwner(revoked, "")
	e.wantOwner(held, "a")
}

func testRevokeClosed(e *env, rv lease.Revoker) {
	k := e.key("k")
	e.mustAcquire(k, "a", e.long)
	c, ok := e.p.(io.Closer)
	if !ok {
		e.t.Fatalf("provider %T is not an io.Closer; this subtest closes the provider through io.Closer", e.p)
	}
	if err := c.Close(); err != nil {
		e.t.Fatalf("Close: %v", err)
	}
	if err := rv.RevokeLease(e.ctx, k, "why"); !errors.Is(err, lease.ErrClosed) {
		e.t.Errorf("RevokeLease after Close = %v, want lease.ErrClosed", err)
	}
	if err := rv.ForceRevokeLease(e.ctx, k, "why"); !errors.Is(err, lease.ErrClosed) {
		e.t.Errorf("ForceRevokeLease after Close = %v, want lease.ErrClosed", err)
	}
	if _, err := rv.LeaseState(e.ctx, k); !errors.Is(err, lease.ErrClosed) {
		e.t.Errorf("LeaseState after Close = %v, want lease.ErrClosed", err)
	}
}

// testTokenRevoker: RevokeLeaseToken and ForceRevokeLeaseToken apply only
// to the tenure of their token: a revoke naming an ended tenure (of the same
// owner or another) touches the live one nowhere and reports ErrNotHeld, as
// one of a free key does; one naming the live tenure revokes it.
func testTokenRevoker(e *env, rv lease.Revoker) {
	tr, ok := rv.(lease.TokenRevoker)
	if !ok {
		e.t.Skipf("provider %T does not implement lease.TokenRevoker", rv)
	}
	k := e.key("k")
	r1 := e.mustAcquire(k, "a", e.long)
	e.release(k, "a")
	if err := tr.RevokeLeaseToken(e.ctx, k, "why", r1.Token); !errors.Is(err, lease.ErrNotHeld) {
		e.t.Fatalf("RevokeLeaseToken of a free key = %v, want an error matching lease.ErrNotHeld", err)
	}
	r2 := e.mustAcquire(k, "a", e.long) // the same owner's next tenure
	r3 := e.mustAcquire(e.key("other"), "b", e.long)
	for _, tok := range []uint64{r1.Token, r3.Token, r2.Token + 1} {
		if err := tr.RevokeLeaseToken(e.ctx, k, "why", tok); !errors.Is(err, lease.ErrNotHeld) {
			e.t.Fatalf("RevokeLeaseToken with token %d while token %d is live = %v, want an error matching lease.ErrNotHeld", tok, r2.Token, err)
		}
		if err := tr.ForceRevokeLeaseToken(e.ctx, k, "why", tok); !errors.Is(err, lease.ErrNotHeld) {
			e.t.Fatalf("ForceRevokeLeaseToken with token %d while token %d is live = %v, want an error matching lease.ErrNotHeld", tok, r2.Token, err)
		}
	}
	if s := e.state(rv, k); s.Status != lease.StatusActive || s.Owner != "a" || s.Token != r2.Token || !s.Live() {
		e.t.Fatalf("LeaseState after revokes of other tenures = %+v, want a's tenure %d active", s, r2.Token)
	}
	if ok, err := e.p.RenewLease(e.ctx, k, "a", e.long); err != nil || !ok {
		e.t.Fatalf("RenewLease after revokes of other tenures = %v, %v; want true, nil", ok, err)
	}
	if err := tr.RevokeLeaseToken(e.ctx, k, "first", r2.Token); err != nil {
		e.t.Fatalf("RevokeLeaseToken of the live tenure: %v", err)
	}
	_, err := e.p.RenewLease(e.ctx, k, "a", e.long)
	e.wantRevokedErr("RenewLease after RevokeLeaseToken", err, k, "a", "first")
	if err := tr.ForceRevokeLeaseToken(e.ctx, k, "second", r2.Token); err != nil {
		e.t.Fatalf("ForceRevokeLeaseToken of the revoked live tenure: %v", err)
	}
	e.wantOwner(k, "")
	if s := e.state(rv, k); s.Status != lease.StatusRevoked || !s.Forced || s.Token != r2.Token || s.Reason != "first" {
		e.t.Fatalf("LeaseState after ForceRevokeLeaseToken = %+v, want revoked, forced, token %d, the first reason", s, r2.Token)
	}
	for _, f := range []func(context.Context, string, string, uint64) error{tr.RevokeLeaseToken, tr.ForceRevokeLeaseToken} {
		if err := f(e.ctx, k, "why", 0); !errors.Is(err, lease.ErrInvalid) {
			e.t.Fatalf("revoke with token 0 = %v, want ErrInvalid", err)
		}
		if err := f(e.ctx, k, "", r2.Token); !errors.Is(err, lease.ErrInvalid) {
			e.t.Fatalf("revoke with an empty reason = %v, want ErrInvalid", err)
		}
	}
}
