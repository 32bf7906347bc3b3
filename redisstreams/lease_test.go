package redisstreams

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/lease/leasetest"
)

// leaseEnv is one deployment the lease tests run on: a fresh, isolated
// backend per call and a way to let time pass for it.
type leaseEnv struct {
	new     func(t *testing.T) *Backend
	advance func(t *testing.T, b *Backend, d time.Duration) // nil: sleep
	ttl     time.Duration
}

func (e leaseEnv) wait(t *testing.T, b *Backend, d time.Duration) {
	t.Helper()
	if e.advance != nil {
		e.advance(t, b, d)
		return
	}
	time.Sleep(d)
}

// run runs the exported conformance suite and then the checks of this
// backend beyond it.
func (e leaseEnv) run(t *testing.T) {
	cfg := leasetest.Config{
		New: func(t *testing.T) lease.Provider { return e.new(t) },
		TTL: e.ttl,
	}
	if e.advance != nil {
		cfg.Advance = func(t *testing.T, p lease.Provider, d time.Duration) { e.advance(t, p.(*Backend), d) }
	}
	t.Run("Conformance", func(t *testing.T) { leasetest.Run(t, cfg) })
	t.Run("Redis", func(t *testing.T) { runLeaseExtras(t, e) })
}

var prefixSeq atomic.Int64

// newBackendOn returns a Backend on c with a prefix of its own, closed by
// t.Cleanup, so tests sharing one server do not see each other's keys.
func newBackendOn(t testing.TB, c redis.UniversalClient) *Backend {
	t.Helper()
	b, err := New(c, Options{Prefix: fmt.Sprintf("lt%d", prefixSeq.Add(1))})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// TestLeaseConformance runs the lease checks on every deployment of
// redistest.Deployments, each Backend with a key prefix of its own: on real
// time (TTL 200ms) on a private redis-server, a 3-master Cluster and a
// Sentinel deployment through one failover client; on miniredis (Lua by
// gopher-lua) time passes only when the test fast-forwards it (TTL 10s).
func TestLeaseConformance(t *testing.T) {
	redistest.ForEachDeployment(t, func(t *testing.T, d *redistest.Deployed) {
		c := d.NewClient(t)
		env := leaseEnv{new: func(t *testing.T) *Backend { return newBackendOn(t, c) }, ttl: 200 * time.Millisecond}
		if d.FastForward != nil {
			env.ttl = 10 * time.Second
			env.advance = func(_ *testing.T, _ *Backend, by time.Duration) { d.FastForward(by) }
		}
		env.run(t)
	})
}

// runLeaseExtras checks what the conformance suite does not: names that try
// to break the key layout, prefix listing with glob characters, exact TTLs,
// batches larger than one pipeline, and the NOSCRIPT fallback of every
// operation.
func runLeaseExtras(t *testing.T, env leaseEnv) {
	ttl := env.ttl
	long := 60 * ttl // for leases that must not expire during a subtest
	t.Run("AcquireReportsServerTTLAndToken", func(t *testing.T) {
		b := env.new(t)
		before := serverMicros(t, b)
		r := mustAcquire(t, b, "k", "a", ttl)
		if !r.Acquired || r.Owner != "a" || r.Token < before || r.TTL != ttl {
			t.Fatalf("first acquire = %+v, want acquired by a, a token from the server's clock (>= %d), TTL %v", r, before, ttl)
		}
		tok := r.Token
		lost := mustAcquire(t, b, "k", "b", ttl)
		if lost.Acquired || lost.Owner != "a" || lost.Token != tok || lost.TTL <= 0 || lost.TTL > ttl {
			t.Fatalf("contended acquire = %+v, want a's lease, token %d, 0 < TTL <= %v", lost, tok, ttl)
		}
		if err := error(lease.NewHeldError("k", lost)); !errors.Is(err, lease.ErrHeld) || !strings.Contains(err.Error(), "held by a") {
			t.Fatalf("NewHeldError = %v, want an ErrHeld naming a", err)
		}
		env.wait(t, b, ttl/2)
		if again := mustAcquire(t, b, "k", "a", ttl); !again.Acquired || again.Token != tok || again.TTL != ttl {
			t.Fatalf("re-acquire = %+v, want acquired, token %d, TTL %v", again, tok, ttl)
		}
		if info := mustInspect(t, b, "k"); info.TTL <= ttl/2+ttl/8 {
			t.Fatalf("TTL after re-acquire = %v, want refreshed towards %v", info.TTL, ttl)
		}
	})
	t.Run("OddNames", func(t *testing.T) {
		b := env.new(t)
		names := oddNames()
		for i, n := range names {
			if r := mustAcquire(t, b, n, n+"/owner:{x}", long); !r.Acquired || r.Owner != n+"/owner:{x}" {
				t.Fatalf("acquire %q = %+v, want a first tenure (names must not collide)", n, r)
			}
			if got := mustOwner(t, b, n); got != n+"/owner:{x}" {
				t.Fatalf("owner of %q = %q", n, got)
			}
			for _, m := range names[:i] {
				if got := mustOwner(t, b, m); got != m+"/owner:{x}" {
					t.Fatalf("after acquiring %q, owner of %q = %q", n, m, got)
				}
			}
		}
		infos := mustList(t, b, "")
		if got := infoKeys(infos); !slices.Equal(got, sorted(names)) {
			t.Fatalf("ListLeases(\"\") = %q, want %q", got, sorted(names))
		}
	})
	t.Run("InspectInvalidKey", func(t *testing.T) {
		b := env.new(t)
		if _, err := b.InspectLease(t.Context(), ""); !errors.Is(err, lease.ErrInvalid) {
			t.Fatalf("InspectLease(\"\") = %v, want lease.ErrInvalid", err)
		}
	})
	t.Run("List", func(t *testing.T) {
		b := env.new(t)
		for _, k := range []string{"jobs/1", "jobs/2", "jobs*", "job", "other/1"} {
			mustAcquire(t, b, k, "o-"+k, long)
		}
		mustAcquire(t, b, "jobs/gone", "x", long)
		mustRelease(t, b, "jobs/gone", "x")
		tests := []struct {
			prefix string
			want   []string
		}{
			{"", []string{"job", "jobs*", "jobs/1", "jobs/2", "other/1"}},
			{"jobs", []string{"jobs*", "jobs/1", "jobs/2"}},
			{"jobs/", []string{"jobs/1", "jobs/2"}},
			{"jobs*", []string{"jobs*"}},
			{"j?bs", nil},
			{"nothing", nil},
		}
		for _, tc := range tests {
			infos := mustList(t, b, tc.prefix)
			if got := infoKeys(infos); !slices.Equal(got, tc.want) {
				t.Errorf("ListLeases(%q) = %q, want %q", tc.prefix, got, tc.want)
			}
			for _, in := range infos {
				if in.Owner != "o-"+in.Key || in.Token == 0 || in.TTL <= 0 || in.TTL > long {
					t.Errorf("ListLeases(%q): %+v, want owner o-%s, a token and 0 < TTL <= %v", tc.prefix, in, in.Key, long)
				}
			}
		}
	})
	t.Run("RenewLeasesLarge", func(t *testing.T) {
		// More than two renew_many calls' worth, with every kind of
		// outcome mixed in: held, never held, taken by another owner,
		// expired, released, asked for by the wrong owner, and the same key
		// twice in one batch.
		b := env.new(t)
		reqs, want := mixedRenewals(t, b, env, 2*PipelineChunk+17)
		got, err := b.RenewLeases(t.Context(), reqs)
		if err != nil {
			t.Fatalf("RenewLeases: %v", err)
		}
		checkRenewals(t, b, reqs, want, got, long)
		// Once more, now that every script is cached.
		if got, err = b.RenewLeases(t.Context(), reqs); err != nil {
			t.Fatalf("RenewLeases again: %v", err)
		}
		checkRenewals(t, b, reqs, want, got, long)
	})
	t.Run("RenewLeasesNoScript", func(t *testing.T) {
		b := env.new(t)
		reqs, want := mixedRenewals(t, b, env, 2*PipelineChunk+17)
		if err := b.client.ScriptFlush(t.Context()).Err(); err != nil {
			t.Fatalf("SCRIPT FLUSH: %v", err)
		}
		got, err := b.RenewLeases(t.Context(), reqs)
		if err != nil {
			t.Fatalf("RenewLeases after SCRIPT FLUSH: %v", err)
		}
		checkRenewals(t, b, reqs, want, got, long)
	})
	t.Run("ConcurrentCalls", func(t *testing.T) {
		// Many goroutines at once, so that calls are coalesced into
		// batches: each still gets its own, exact result.
		b := env.new(t)
		ctx := t.Context()
		var wg sync.WaitGroup
		for g := range 32 {
			wg.Go(func() {
				key, me, other := fmt.Sprintf("c%d", g), fmt.Sprintf("me%d", g), fmt.Sprintf("other%d", g)
				var last uint64
				for i := range 20 {
					r, err := b.AcquireLease(ctx, key, me, long)
					if err != nil || !r.Acquired || r.Owner != me || r.Token <= last {
						t.Errorf("%s: acquire %d = %+v, %v; want a new tenure after token %d", key, i, r, err, last)
						return
					}
					last = r.Token
					if lost, err := b.AcquireLease(ctx, key, other, long); err != nil || lost.Acquired || lost.Owner != me || lost.Token != last {
						t.Errorf("%s: contended acquire = %+v, %v; want held by %s with token %d", key, lost, err, me, last)
						return
					}
					if ok, err := b.RenewLease(ctx, key, other, long); err != nil || ok {
						t.Errorf("%s: renew by another owner = %v, %v", key, ok, err)
						return
					}
					if ok, err := b.RenewLease(ctx, key, me, long); err != nil || !ok {
						t.Errorf("%s: renew = %v, %v", key, ok, err)
						return
					}
					if o, err := b.GetLeaseOwner(ctx, key); err != nil || o != me {
						t.Errorf("%s: owner = %q, %v", key, o, err)
						return
					}
					if err := b.ReleaseLease(ctx, key, other); err != nil {
						t.Errorf("%s: release by another owner: %v", key, err)
						return
					}
					if err := b.ReleaseLease(ctx, key, me); err != nil {
						t.Errorf("%s: release: %v", key, err)
						return
					}
				}
			})
		}
		wg.Wait()
	})
	t.Run("CancelledWhileQueued", func(t *testing.T) {
		// Calls whose ctx ends while they wait for a batch return an
		// error or their real result (never a silent "not acquired"), and
		// leave the others' results intact.
		b := env.new(t)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		var wg sync.WaitGroup
		var mu sync.Mutex
		acquired := map[string]bool{}
		for g := range 64 {
			wg.Go(func() {
				key := fmt.Sprintf("q%d", g)
				c := t.Context()
				if g%2 == 1 {
					c = ctx
				}
				r, err := b.AcquireLease(c, key, "me", long)
				switch {
				case err == nil && r.Acquired:
					mu.Lock()
					acquired[key] = true
					mu.Unlock()
				case err == nil:
					t.Errorf("%s: acquire = %+v, nil error; want acquired or an error", key, r)
				case g%2 == 0:
					t.Errorf("%s: acquire on a live ctx: %v", key, err)
				}
			})
			if g == 40 {
				cancel()
			}
		}
		wg.Wait()
		for g := range 64 {
			key := fmt.Sprintf("q%d", g)
			if g%2 == 0 && !acquired[key] {
				t.Errorf("%s: not acquired on a live ctx", key)
			}
			if acquired[key] && mustOwner(t, b, key) != "me" {
				t.Errorf("%s: acquired, but the owner is %q", key, mustOwner(t, b, key))
			}
		}
	})
	t.Run("NoScript", func(t *testing.T) {
		b := env.new(t)
		flush := func() {
			t.Helper()
			if err := b.client.ScriptFlush(t.Context()).Err(); err != nil {
				t.Fatalf("SCRIPT FLUSH: %v", err)
			}
		}
		flush()
		if r := mustAcquire(t, b, "k", "a", long); !r.Acquired {
			t.Fatalf("acquire after SCRIPT FLUSH = %+v", r)
		}
		flush()
		if r := mustAcquire(t, b, "k", "b", long); r.Acquired || r.Owner != "a" {
			t.Fatalf("contended acquire after SCRIPT FLUSH = %+v", r)
		}
		flush()
		if got := mustOwner(t, b, "k"); got != "a" {
			t.Fatalf("owner after SCRIPT FLUSH = %q", got)
		}
		flush()
		if !mustRenew(t, b, "k", "a", long) {
			t.Fatal("renew after SCRIPT FLUSH = false")
		}
		flush()
		if !mustTransfer(t, b, "k", "a", "b", long) {
			t.Fatal("transfer after SCRIPT FLUSH = false")
		}
		flush()
		if info := mustInspect(t, b, "k"); info.Owner != "b" {
			t.Fatalf("inspect after SCRIPT FLUSH = %+v", info)
		}
		flush()
		if infos := mustList(t, b, ""); len(infos) != 1 || infos[0].Owner != "b" {
			t.Fatalf("list after SCRIPT FLUSH = %+v", infos)
		}
		flush()
		got, err := b.RenewLeases(t.Context(), []lease.Renewal{
			{Key: "k", Owner: "b", TTL: long}, {Key: "k", Owner: "a", TTL: long}, {Key: "x", Owner: "b", TTL: long},
		})
		if want := []bool{true, false, false}; err != nil || !slices.Equal(got, want) {
			t.Fatalf("RenewLeases after SCRIPT FLUSH = %v, %v; want %v", got, err, want)
		}
		flush()
		mustRelease(t, b, "k", "b")
		if got := mustOwner(t, b, "k"); got != "" {
			t.Fatalf("owner after release after SCRIPT FLUSH = %q", got)
		}
	})
}

// mixedRenewals sets up n leases for a batch renewal on b and returns the
// renewals (owner "me", TTL long) and the result each must get: key i is held
// by me when i%7 is 1, 3 or 5 (5: with half the TTL the renewal asks for),
// never held when i%7 is 0, held by another owner when i%7 is 2,
// held by me but expired when i%7 is 4, released when i%7 is 6; the
// renewal of every 11th key asks for owner "not-me" instead, and the last
// two requests repeat keys 1 (held) and 2 (another's).
func mixedRenewals(t *testing.T, b *Backend, env leaseEnv, n int) ([]lease.Renewal, []bool) {
	t.Helper()
	ttl, long := env.ttl, 60*env.ttl
	reqs := make([]lease.Renewal, n)
	want := make([]bool, n)
	for i := range reqs {
		key := fmt.Sprintf("k%d", i)
		reqs[i] = lease.Renewal{Key: key, Owner: "me", TTL: long}
		switch i % 7 {
		case 1, 3:
			mustAcquire(t, b, key, "me", long)
			want[i] = true
		case 2:
			mustAcquire(t, b, key, "other", long)
		case 4:
			mustAcquire(t, b, key, "me", ttl/2)
		case 5:
			mustAcquire(t, b, key, "me", long/2)
			want[i] = true
		case 6:
			mustAcquire(t, b, key, "me", long)
			mustRelease(t, b, key, "me")
		}
		if i%11 == 10 {
			reqs[i].Owner = "not-me"
			want[i] = false
		}
	}
	reqs = append(reqs, lease.Renewal{Key: "k1", Owner: "me", TTL: long}, lease.Renewal{Key: "k2", Owner: "me", TTL: long})
	want = append(want, true, false)
	env.wait(t, b, ttl) // the i%7 == 4 leases expire
	return reqs, want
}

// checkRenewals checks the results of a batch renewal of mixedRenewals and
// the state it left: renewed leases have their TTL reset to long, expired
// ones were not re-created, other owners' leases were not extended.
func checkRenewals(t *testing.T, b *Backend, reqs []lease.Renewal, want, got []bool, long time.Duration) {
	t.Helper()
	if len(got) != len(reqs) {
		t.Fatalf("RenewLeases returned %d results for %d requests", len(got), len(reqs))
	}
	for i := range reqs {
		if got[i] != want[i] {
			t.Errorf("RenewLeases[%d] (key %s, owner %s) = %v, want %v", i, reqs[i].Key, reqs[i].Owner, got[i], want[i])
		}
	}
	for i := range len(reqs) - 2 {
		info := mustInspect(t, b, reqs[i].Key)
		switch {
		case want[i] && (info.Owner != "me" || info.TTL <= long/2):
			// The i%7 == 5 leases had long/2 before their renewal.
			t.Errorf("key %s: %+v after its renewal, want held by me with TTL reset towards %v", reqs[i].Key, info, long)
		case i%7 == 0 || i%7 == 4 || i%7 == 6:
			if info.Owner != "" {
				t.Errorf("key %s: %+v, want no lease (an expired or absent lease must not be re-created)", reqs[i].Key, info)
			}
		case i%7 == 2 && info.Owner != "other":
			t.Errorf("key %s: %+v, want still other's", reqs[i].Key, info)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
}

// oddNames are lease keys that try to break the key layout: braces that
// would move the hash tag, colons and kind names that would forge another
// key, NUL, glob characters, percent escapes.
func oddNames() []string {
	return []string{
		"plain", "{", "}", "{}", "}{", "{x}", "a{b}c", "a}b{c", ":", "::", "a:b",
		"\x00", "a\x00b", "%7B", "%", "%%7D", "*", "?", "[a-z]", `\`,
		"x}:fence:{x", "}:lease:{plain", "../plain", "plain}", "{plain",
		"leasebus:lease:{plain}", "ünïcødé", " ",
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	sort.Strings(s)
	return s
}

func infoKeys(infos []lease.Info) []string {
	var ks []string
	for _, in := range infos {
		ks = append(ks, in.Key)
	}
	sort.Strings(ks)
	return ks
}

func mustAcquire(t *testing.T, b *Backend, key, owner string, ttl time.Duration) lease.Result {
	t.Helper()
	r, err := b.AcquireLease(t.Context(), key, owner, ttl)
	if err != nil {
		t.Fatalf("AcquireLease(%q, %q): %v", key, owner, err)
	}
	return r
}

func mustOwner(t *testing.T, b *Backend, key string) string {
	t.Helper()
	o, err := b.GetLeaseOwner(t.Context(), key)
	if err != nil {
		t.Fatalf("GetLeaseOwner(%q): %v", key, err)
	}
	return o
}

func mustRelease(t *testing.T, b *Backend, key, owner string) {
	t.Helper()
	if err := b.ReleaseLease(t.Context(), key, owner); err != nil {
		t.Fatalf("ReleaseLease(%q, %q): %v", key, owner, err)
	}
}

func mustRenew(t *testing.T, b *Backend, key, owner string, ttl time.Duration) bool {
	t.Helper()
	ok, err := b.RenewLease(t.Context(), key, owner, ttl)
	if err != nil {
		t.Fatalf("RenewLease(%q, %q): %v", key, owner, err)
	}
	return ok
}

func mustTransfer(t *testing.T, b *Backend, key, from, to string, ttl time.Duration) bool {
	t.Helper()
	ok, err := b.TransferLease(t.Context(), key, from, to, ttl)
	if err != nil {
		t.Fatalf("TransferLease(%q, %q, %q): %v", key, from, to, err)
	}
	return ok
}

func mustInspect(t *testing.T, b *Backend, key string) lease.Info {
	t.Helper()
	info, err := b.InspectLease(t.Context(), key)
	if err != nil {
		t.Fatalf("InspectLease(%q): %v", key, err)
	}
	return info
}

func mustList(t *testing.T, b *Backend, prefix string) []lease.Info {
	t.Helper()
	infos, err := b.ListLeases(t.Context(), prefix)
	if err != nil {
		t.Fatalf("ListLeases(%q): %v", prefix, err)
	}
	return infos
}

// TestLeaseRestartAppendOnly restarts Redis (gracefully, with SIGKILL, and
// with SIGKILL and an outage longer than the TTL) under a lease held with
// lease.Keep. Afterwards the holder either still holds the lease, with the
// same token, or has seen the loss (its Held is done); it never believes it
// holds a lease someone else has. A new holder always gets a higher token
// (the fencing counter survived), and the old holder can neither renew,
// transfer nor release the new holder's lease.
func TestLeaseRestartAppendOnly(t *testing.T) {
	tests := []struct {
		name     string
		kill     bool
		outage   time.Duration // extra time the server stays down
		ttl      time.Duration
		wantKept bool
	}{
		{name: "Stop", ttl: 3 * time.Second, wantKept: true},
		{name: "Kill", kill: true, ttl: 3 * time.Second, wantKept: true},
		{name: "KillLongerThanTTL", kill: true, outage: 900 * time.Millisecond, ttl: 600 * time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := redistest.Start(t, redistest.Options{AppendOnly: true})
			b := newBackendOn(t, s.Client(t))
			// A few generations first, so the counter is well past 1.
			mustAcquire(t, b, "job", "old", tc.ttl)
			mustTransfer(t, b, "job", "old", "older", tc.ttl)
			mustRelease(t, b, "job", "older")
			h, err := lease.Keep(t.Context(), b, "job", "holder", tc.ttl)
			if err != nil {
				t.Fatalf("Keep: %v", err)
			}
			t.Cleanup(func() { h.Release(context.Background()) })
			if h.Token() < 3 {
				t.Fatalf("holder's token = %d, want >= 3", h.Token())
			}
			time.Sleep(tc.ttl / 2) // at least one renewal before the restart

			if tc.kill {
				s.Kill(t)
			} else {
				s.Stop(t)
			}
			time.Sleep(tc.outage)
			s.Restart(t)
			// Let the Keeper renew (or give up) against the new process.
			time.Sleep(tc.ttl / 2)

			r := mustAcquire(t, b, "job", "contender", tc.ttl)
			holderBelieves := h.Err() == nil
			if !r.Acquired {
				info := mustInspect(t, b, "job")
				if r.Owner != "holder" || r.Token != h.Token() || info.Owner != "holder" || info.Token != h.Token() {
					t.Fatalf("contender lost to %+v, inspect %+v; want the holder's lease, token %d", r, info, h.Token())
				}
				if !holderBelieves {
					t.Fatalf("holder gave up (%v) although its lease survived", h.Err())
				}
				if !tc.wantKept {
					t.Fatal("lease kept across an outage longer than its TTL")
				}
				return
			}
			if holderBelieves {
				t.Fatalf("contender acquired %+v while the holder still believes it holds the lease (token %d)", r, h.Token())
			}
			if !errors.Is(h.Err(), lease.ErrNotHeld) {
				t.Fatalf("holder's Err = %v, want lease.ErrNotHeld", h.Err())
			}
			if r.Token <= h.Token() {
				t.Fatalf("contender's token %d, want > the holder's %d (fencing counter lost?)", r.Token, h.Token())
			}
			if mustRenew(t, b, "job", "holder", tc.ttl) || mustTransfer(t, b, "job", "holder", "x", tc.ttl) {
				t.Fatal("the old holder renewed or transferred the contender's lease")
			}
			mustRelease(t, b, "job", "holder")
			if got := mustOwner(t, b, "job"); got != "contender" {
				t.Fatalf("owner after the old holder's release = %q, want contender", got)
			}
			if tc.wantKept {
				t.Errorf("lease lost (%v) across a restart shorter than its TTL, want kept (append-only file)", h.Err())
			}
		})
	}
}

// TestLeaseSeveredConnection cuts every connection to Redis and refuses new
// ones: each operation returns an error (never a silent "not acquired" or
// "not renewed"), and all work again once Redis is reachable; the lease
// taken before the cut is intact.
func TestLeaseSeveredConnection(t *testing.T) {
	s := redistest.Start(t, redistest.Options{})
	p := redistest.NewProxy(t, s.Addr())
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: 1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { c.Close() })
	b := newBackendOn(t, c)
	first := mustAcquire(t, b, "k", "a", time.Minute)

	p.SetRefuse(true)
	p.CutAll()
	ctx := t.Context()
	checks := map[string]error{}
	var r lease.Result
	r, checks["acquire"] = b.AcquireLease(ctx, "k", "a", time.Minute)
	if r.Acquired {
		t.Errorf("acquire over a severed connection = %+v, want not acquired", r)
	}
	_, checks["owner"] = b.GetLeaseOwner(ctx, "k")
	checks["release"] = b.ReleaseLease(ctx, "k", "a")
	_, checks["renew"] = b.RenewLease(ctx, "k", "a", time.Minute)
	_, checks["transfer"] = b.TransferLease(ctx, "k", "a", "b", time.Minute)
	_, checks["inspect"] = b.InspectLease(ctx, "k")
	_, checks["list"] = b.ListLeases(ctx, "")
	_, checks["batch"] = b.RenewLeases(ctx, []lease.Renewal{{Key: "k", Owner: "a", TTL: time.Minute}})
	for name, err := range checks {
		if err == nil {
			t.Errorf("%s over a severed connection: nil error", name)
		} else if errors.Is(err, redis.Nil) || errors.Is(err, lease.ErrInvalid) || errors.Is(err, lease.ErrClosed) {
			t.Errorf("%s over a severed connection: %v, want a transport error", name, err)
		}
	}

	p.SetRefuse(false)
	if info := mustInspect(t, b, "k"); info.Owner != "a" || info.Token != first.Token {
		t.Fatalf("after reconnecting: %+v, want a's lease with token %d", info, first.Token)
	}
	if !mustRenew(t, b, "k", "a", time.Minute) {
		t.Fatal("renew after reconnecting = false")
	}
}

// serverMicros returns the server's clock in microseconds (TIME), the floor
// of a fresh key's first token.
func serverMicros(t *testing.T, b *Backend) uint64 {
	t.Helper()
	tm, err := b.client.Time(t.Context()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return uint64(tm.UnixMicro())
}
