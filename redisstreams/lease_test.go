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

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/lease"
)

// leaseEnv is what the lease contract checks below need from one deployment:
// a fresh, isolated backend per call and a way to let time pass for it.
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

var prefixSeq atomic.Int64

// newBackendOn returns a Backend on c with a prefix of its own, closed by
// t.Cleanup, so tests sharing one server do not see each other's keys.
func newBackendOn(t *testing.T, c redis.UniversalClient) *Backend {
	t.Helper()
	b, err := New(c, Options{Prefix: fmt.Sprintf("lt%d", prefixSeq.Add(1))})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// standaloneEnv runs the checks on one private redis-server; TTLs are real.
func standaloneEnv(t *testing.T) leaseEnv {
	s := redistest.Start(t, redistest.Options{})
	c := s.Client(t)
	return leaseEnv{new: func(t *testing.T) *Backend { return newBackendOn(t, c) }, ttl: 400 * time.Millisecond}
}

// clusterEnv runs the checks on a private 3-master Redis Cluster.
func clusterEnv(t *testing.T) leaseEnv {
	cl := redistest.StartCluster(t, 3)
	c := cl.Client(t)
	return leaseEnv{new: func(t *testing.T) *Backend { return newBackendOn(t, c) }, ttl: 400 * time.Millisecond}
}

// miniredisEnv runs the checks on miniredis (in process, Lua by gopher-lua);
// time passes only when the test fast-forwards it.
func miniredisEnv(t *testing.T) leaseEnv {
	var mu sync.Mutex
	servers := map[*Backend]*miniredis.Miniredis{}
	return leaseEnv{
		new: func(t *testing.T) *Backend {
			m := miniredis.RunT(t)
			c := redis.NewClient(&redis.Options{Addr: m.Addr()})
			t.Cleanup(func() { c.Close() })
			b := newBackendOn(t, c)
			mu.Lock()
			servers[b] = m
			mu.Unlock()
			return b
		},
		advance: func(t *testing.T, b *Backend, d time.Duration) {
			mu.Lock()
			m := servers[b]
			mu.Unlock()
			m.FastForward(d)
		},
		ttl: 10 * time.Second,
	}
}

func TestLeaseStandalone(t *testing.T) { runLeaseChecks(t, standaloneEnv(t)) }

func TestClusterLease(t *testing.T) { runLeaseChecks(t, clusterEnv(t)) }

func TestMiniredisLease(t *testing.T) { runLeaseChecks(t, miniredisEnv(t)) }

// runLeaseChecks checks the lease.Provider contract (and the Inspector and
// BatchRenewer capabilities) of the backends env makes.
func runLeaseChecks(t *testing.T, env leaseEnv) {
	ttl := env.ttl
	t.Run("AcquireFree", func(t *testing.T) {
		b := env.new(t)
		r := mustAcquire(t, b, "k", "a", ttl)
		if !r.Acquired || r.Owner != "a" || r.Token == 0 || r.TTL != ttl {
			t.Fatalf("acquire of a free key = %+v, want acquired by a with a token and TTL %v", r, ttl)
		}
		if got := mustOwner(t, b, "k"); got != "a" {
			t.Fatalf("owner = %q, want a", got)
		}
	})
	t.Run("AcquireHeld", func(t *testing.T) {
		b := env.new(t)
		first := mustAcquire(t, b, "k", "a", ttl)
		r := mustAcquire(t, b, "k", "b", ttl)
		if r.Acquired || r.Owner != "a" || r.Token != first.Token || r.TTL <= 0 || r.TTL > ttl {
			t.Fatalf("acquire of a held key = %+v, want lost to a (token %d) with 0 < TTL <= %v", r, first.Token, ttl)
		}
		if err := error(lease.NewHeldError("k", r)); !errors.Is(err, lease.ErrHeld) || !strings.Contains(err.Error(), "held by a") {
			t.Fatalf("NewHeldError = %v, want an ErrHeld naming a", err)
		}
	})
	t.Run("ReacquireRefreshesKeepsToken", func(t *testing.T) {
		b := env.new(t)
		first := mustAcquire(t, b, "k", "a", ttl)
		env.wait(t, b, ttl/2)
		again := mustAcquire(t, b, "k", "a", ttl)
		if !again.Acquired || again.Token != first.Token || again.TTL != ttl {
			t.Fatalf("re-acquire = %+v, want acquired, token %d, TTL %v", again, first.Token, ttl)
		}
		info := mustInspect(t, b, "k")
		if info.TTL <= ttl/2+ttl/8 {
			t.Fatalf("TTL after re-acquire = %v, want refreshed towards %v", info.TTL, ttl)
		}
	})
	t.Run("TokensGrow", func(t *testing.T) {
		b := env.new(t)
		var last uint64
		next := func(what string, tok uint64) {
			t.Helper()
			if tok <= last {
				t.Fatalf("token after %s = %d, want > %d", what, tok, last)
			}
			last = tok
		}
		next("first acquire", mustAcquire(t, b, "k", "a", ttl).Token)
		mustRelease(t, b, "k", "a")
		next("release and acquire", mustAcquire(t, b, "k", "b", ttl).Token)
		env.wait(t, b, ttl+ttl/2)
		r := mustAcquire(t, b, "k", "c", ttl)
		if !r.Acquired {
			t.Fatalf("acquire after expiry = %+v, want acquired", r)
		}
		next("expiry and acquire", r.Token)
		if ok := mustTransfer(t, b, "k", "c", "d", ttl); !ok {
			t.Fatal("transfer c->d = false, want true")
		}
		next("transfer", mustInspect(t, b, "k").Token)
		// A different key has its own counter.
		if tok := mustAcquire(t, b, "other", "a", ttl).Token; tok != 1 {
			t.Fatalf("first token of another key = %d, want 1", tok)
		}
	})
	t.Run("Renew", func(t *testing.T) {
		b := env.new(t)
		mustAcquire(t, b, "k", "a", ttl)
		if mustRenew(t, b, "k", "b", ttl) {
			t.Fatal("renew by a non-holder = true, want false")
		}
		env.wait(t, b, ttl/2)
		if !mustRenew(t, b, "k", "a", 2*ttl) {
			t.Fatal("renew by the holder = false, want true")
		}
		if info := mustInspect(t, b, "k"); info.TTL <= ttl || info.Owner != "a" {
			t.Fatalf("after renew to %v: %+v, want owner a and TTL > %v", 2*ttl, info, ttl)
		}
		if mustRenew(t, b, "free", "a", ttl) {
			t.Fatal("renew of a free key = true, want false")
		}
	})
	t.Run("RenewNeverRecreates", func(t *testing.T) {
		b := env.new(t)
		mustAcquire(t, b, "k", "a", ttl)
		env.wait(t, b, ttl+ttl/2)
		if mustRenew(t, b, "k", "a", ttl) {
			t.Fatal("renew of an expired lease = true, want false")
		}
		if got := mustOwner(t, b, "k"); got != "" {
			t.Fatalf("owner after a refused renew = %q, want none", got)
		}
	})
	t.Run("Release", func(t *testing.T) {
		b := env.new(t)
		mustAcquire(t, b, "k", "a", ttl)
		mustRelease(t, b, "k", "b")
		if got := mustOwner(t, b, "k"); got != "a" {
			t.Fatalf("owner after a non-holder's release = %q, want a", got)
		}
		mustRelease(t, b, "k", "a")
		if got := mustOwner(t, b, "k"); got != "" {
			t.Fatalf("owner after release = %q, want none", got)
		}
		mustRelease(t, b, "k", "a") // releasing a free key is a no-op
		if r := mustAcquire(t, b, "k", "b", ttl); !r.Acquired {
			t.Fatalf("acquire after release = %+v, want acquired", r)
		}
	})
	t.Run("StaleReleaseKeepsNewHolder", func(t *testing.T) {
		b := env.new(t)
		mustAcquire(t, b, "k", "a", ttl)
		env.wait(t, b, ttl+ttl/2)
		mustAcquire(t, b, "k", "b", ttl)
		mustRelease(t, b, "k", "a")
		if mustRenew(t, b, "k", "a", ttl) {
			t.Fatal("stale renew = true, want false")
		}
		if got := mustOwner(t, b, "k"); got != "b" {
			t.Fatalf("owner after a stale release = %q, want b", got)
		}
	})
	t.Run("Transfer", func(t *testing.T) {
		b := env.new(t)
		first := mustAcquire(t, b, "k", "a", ttl)
		env.wait(t, b, ttl/2)
		if mustTransfer(t, b, "k", "b", "c", ttl) {
			t.Fatal("transfer from a non-holder = true, want false")
		}
		if !mustTransfer(t, b, "k", "a", "b", ttl) {
			t.Fatal("transfer from the holder = false, want true")
		}
		info := mustInspect(t, b, "k")
		if info.Owner != "b" || info.Token <= first.Token || info.TTL <= ttl/2+ttl/8 {
			t.Fatalf("after transfer: %+v, want owner b, token > %d, full TTL %v", info, first.Token, ttl)
		}
		if mustRenew(t, b, "k", "a", ttl) {
			t.Fatal("renew by the old owner = true, want false")
		}
		if mustTransfer(t, b, "k", "a", "c", ttl) {
			t.Fatal("second transfer from the old owner = true, want false")
		}
		if mustTransfer(t, b, "free", "a", "b", ttl) {
			t.Fatal("transfer of a free key = true, want false")
		}
		if got := mustOwner(t, b, "free"); got != "" {
			t.Fatalf("refused transfer created a lease held by %q", got)
		}
	})
	t.Run("TransferNeverFree", func(t *testing.T) {
		b := env.new(t)
		mustAcquire(t, b, "k", "o0", ttl)
		ctx := t.Context()
		stop := make(chan struct{})
		var freeSeen atomic.Int64
		var wg sync.WaitGroup
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if owner, err := b.GetLeaseOwner(ctx, "k"); err == nil && owner == "" {
					freeSeen.Add(1)
				}
			}
		})
		for i := range 50 {
			if !mustTransfer(t, b, "k", fmt.Sprintf("o%d", i), fmt.Sprintf("o%d", i+1), ttl) {
				t.Errorf("transfer %d = false, want true", i)
			}
		}
		close(stop)
		wg.Wait()
		if n := freeSeen.Load(); n > 0 {
			t.Fatalf("the key was seen free %d times during transfers", n)
		}
	})
	t.Run("ConcurrentAcquireOneWins", func(t *testing.T) {
		b := env.new(t)
		var wins atomic.Int64
		var wg sync.WaitGroup
		for i := range 100 {
			wg.Go(func() {
				r, err := b.AcquireLease(t.Context(), "k", fmt.Sprintf("w%d", i), ttl)
				if err != nil {
					t.Error(err)
					return
				}
				if r.Acquired {
					wins.Add(1)
				}
			})
		}
		wg.Wait()
		if n := wins.Load(); n != 1 {
			t.Fatalf("%d of 100 concurrent acquirers won, want 1", n)
		}
	})
	t.Run("OddNames", func(t *testing.T) {
		b := env.new(t)
		names := oddNames()
		for i, n := range names {
			if r := mustAcquire(t, b, n, n+"/owner:{x}", ttl); !r.Acquired || r.Token != 1 {
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
	t.Run("InvalidInput", func(t *testing.T) {
		b := env.new(t)
		ctx := t.Context()
		checks := map[string]error{}
		_, checks["acquire empty key"] = b.AcquireLease(ctx, "", "a", ttl)
		_, checks["acquire empty owner"] = b.AcquireLease(ctx, "k", "", ttl)
		_, checks["acquire zero ttl"] = b.AcquireLease(ctx, "k", "a", 0)
		_, checks["acquire negative ttl"] = b.AcquireLease(ctx, "k", "a", -time.Second)
		_, checks["owner empty key"] = b.GetLeaseOwner(ctx, "")
		checks["release empty key"] = b.ReleaseLease(ctx, "", "a")
		checks["release empty owner"] = b.ReleaseLease(ctx, "k", "")
		_, checks["renew empty owner"] = b.RenewLease(ctx, "k", "", ttl)
		_, checks["renew zero ttl"] = b.RenewLease(ctx, "k", "a", 0)
		_, checks["transfer same owner"] = b.TransferLease(ctx, "k", "a", "a", ttl)
		_, checks["transfer empty to"] = b.TransferLease(ctx, "k", "a", "", ttl)
		_, checks["transfer zero ttl"] = b.TransferLease(ctx, "k", "a", "b", 0)
		_, checks["inspect empty key"] = b.InspectLease(ctx, "")
		_, checks["batch bad request"] = b.RenewLeases(ctx, []lease.Renewal{{Key: "k", Owner: "a", TTL: ttl}, {Key: "k", Owner: "a"}})
		for name, err := range checks {
			if !errors.Is(err, lease.ErrInvalid) {
				t.Errorf("%s: err = %v, want lease.ErrInvalid", name, err)
			}
		}
		if got := mustOwner(t, b, "k"); got != "" {
			t.Fatalf("invalid calls left a lease held by %q", got)
		}
	})
	t.Run("Closed", func(t *testing.T) {
		b := env.new(t)
		mustAcquire(t, b, "k", "a", ttl)
		if err := b.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		ctx := t.Context()
		checks := map[string]error{}
		_, checks["acquire"] = b.AcquireLease(ctx, "k", "a", ttl)
		_, checks["owner"] = b.GetLeaseOwner(ctx, "k")
		checks["release"] = b.ReleaseLease(ctx, "k", "a")
		_, checks["renew"] = b.RenewLease(ctx, "k", "a", ttl)
		_, checks["transfer"] = b.TransferLease(ctx, "k", "a", "b", ttl)
		_, checks["inspect"] = b.InspectLease(ctx, "k")
		_, checks["list"] = b.ListLeases(ctx, "")
		_, checks["batch"] = b.RenewLeases(ctx, []lease.Renewal{{Key: "k", Owner: "a", TTL: ttl}})
		for name, err := range checks {
			if !errors.Is(err, lease.ErrClosed) {
				t.Errorf("%s after Close: err = %v, want lease.ErrClosed", name, err)
			}
		}
	})
	t.Run("Inspect", func(t *testing.T) {
		b := env.new(t)
		if info := mustInspect(t, b, "k"); info != (lease.Info{Key: "k"}) {
			t.Fatalf("inspect of a free key = %+v, want zero Info with Key", info)
		}
		r := mustAcquire(t, b, "k", "a", ttl)
		info := mustInspect(t, b, "k")
		if info.Key != "k" || info.Owner != "a" || info.Token != r.Token || info.TTL <= 0 || info.TTL > ttl {
			t.Fatalf("inspect = %+v, want k held by a, token %d, 0 < TTL <= %v", info, r.Token, ttl)
		}
	})
	t.Run("List", func(t *testing.T) {
		b := env.new(t)
		for _, k := range []string{"jobs/1", "jobs/2", "jobs*", "job", "other/1"} {
			mustAcquire(t, b, k, "o-"+k, ttl)
		}
		mustAcquire(t, b, "jobs/gone", "x", ttl)
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
				if in.Owner != "o-"+in.Key || in.Token == 0 || in.TTL <= 0 || in.TTL > ttl {
					t.Errorf("ListLeases(%q): %+v, want owner o-%s, a token and 0 < TTL <= %v", tc.prefix, in, in.Key, ttl)
				}
			}
		}
	})
	t.Run("RenewLeases", func(t *testing.T) {
		b := env.new(t)
		mustAcquire(t, b, "a", "me", ttl)
		mustAcquire(t, b, "b", "other", ttl)
		mustAcquire(t, b, "c", "me", ttl)
		reqs := []lease.Renewal{
			{Key: "a", Owner: "me", TTL: 2 * ttl},
			{Key: "b", Owner: "me", TTL: 2 * ttl},
			{Key: "free", Owner: "me", TTL: 2 * ttl},
			{Key: "c", Owner: "me", TTL: 2 * ttl},
		}
		got, err := b.RenewLeases(t.Context(), reqs)
		if err != nil {
			t.Fatalf("RenewLeases: %v", err)
		}
		if want := []bool{true, false, false, true}; !slices.Equal(got, want) {
			t.Fatalf("RenewLeases = %v, want %v", got, want)
		}
		if info := mustInspect(t, b, "c"); info.TTL <= ttl {
			t.Fatalf("TTL after batch renew to %v = %v", 2*ttl, info.TTL)
		}
		if got := mustOwner(t, b, "free"); got != "" {
			t.Fatalf("batch renew created a lease held by %q", got)
		}
		if got, err := b.RenewLeases(t.Context(), nil); err != nil || len(got) != 0 {
			t.Fatalf("RenewLeases(nil) = %v, %v; want empty, nil", got, err)
		}
	})
	t.Run("RenewLeasesLarge", func(t *testing.T) {
		b := env.new(t)
		const n = 2*PipelineChunk + 17
		reqs := make([]lease.Renewal, n)
		for i := range reqs {
			reqs[i] = lease.Renewal{Key: fmt.Sprintf("k%d", i), Owner: "me", TTL: ttl}
			if i%3 != 0 {
				mustAcquire(t, b, reqs[i].Key, "me", ttl)
			}
		}
		got, err := b.RenewLeases(t.Context(), reqs)
		if err != nil {
			t.Fatalf("RenewLeases: %v", err)
		}
		for i, ok := range got {
			if ok != (i%3 != 0) {
				t.Fatalf("RenewLeases[%d] = %v, want %v", i, ok, i%3 != 0)
			}
		}
		if infos := mustList(t, b, "k"); len(infos) != n-(n+2)/3 {
			t.Fatalf("ListLeases found %d leases, want %d", len(infos), n-(n+2)/3)
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
		if r := mustAcquire(t, b, "k", "a", ttl); !r.Acquired {
			t.Fatalf("acquire after SCRIPT FLUSH = %+v", r)
		}
		flush()
		if r := mustAcquire(t, b, "k", "b", ttl); r.Acquired || r.Owner != "a" {
			t.Fatalf("contended acquire after SCRIPT FLUSH = %+v", r)
		}
		flush()
		if got := mustOwner(t, b, "k"); got != "a" {
			t.Fatalf("owner after SCRIPT FLUSH = %q", got)
		}
		flush()
		if !mustRenew(t, b, "k", "a", ttl) {
			t.Fatal("renew after SCRIPT FLUSH = false")
		}
		flush()
		if !mustTransfer(t, b, "k", "a", "b", ttl) {
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
			{Key: "k", Owner: "b", TTL: ttl}, {Key: "k", Owner: "a", TTL: ttl}, {Key: "x", Owner: "b", TTL: ttl},
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

// TestLeaseRestartAppendOnly restarts Redis (gracefully and with SIGKILL)
// under a lease its holder keeps renewing. Afterwards the holder either
// still holds it with the same token, or sees the loss; a new holder always
// gets a higher token (the fencing counter survived), and the old holder can
// neither renew, release nor transfer it.
func TestLeaseRestartAppendOnly(t *testing.T) {
	tests := []struct {
		name   string
		kill   bool
		outage time.Duration // extra time the server stays down
		ttl    time.Duration
	}{
		{name: "Stop", ttl: 3 * time.Second},
		{name: "Kill", kill: true, ttl: 3 * time.Second},
		{name: "KillLongerThanTTL", kill: true, outage: 700 * time.Millisecond, ttl: 500 * time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := redistest.Start(t, redistest.Options{AppendOnly: true})
			b := newBackendOn(t, s.Client(t))
			ctx := t.Context()
			first := mustAcquire(t, b, "job", "holder", tc.ttl)
			for range 3 { // a few generations, so the counter is past 1
				mustTransfer(t, b, "job", "holder", "tmp", tc.ttl)
				mustTransfer(t, b, "job", "tmp", "holder", tc.ttl)
			}
			before := mustInspect(t, b, "job")
			if before.Owner != "holder" || before.Token <= first.Token {
				t.Fatalf("before restart: %+v", before)
			}

			// The holder renews every ttl/3, as lease.Keep does, and records
			// until when it believes it holds the lease.
			var (
				mu       sync.Mutex
				believed time.Time // the holder thinks it holds the lease until then
				lost     bool
			)
			believed = time.Now().Add(tc.ttl)
			stop := make(chan struct{})
			var wg sync.WaitGroup
			wg.Go(func() {
				tick := time.NewTicker(tc.ttl / 3)
				defer tick.Stop()
				for {
					select {
					case <-stop:
						return
					case <-tick.C:
					}
					sent := time.Now()
					rctx, cancel := context.WithTimeout(ctx, tc.ttl/3)
					ok, err := b.RenewLease(rctx, "job", "holder", tc.ttl)
					cancel()
					mu.Lock()
					switch {
					case err == nil && ok && !lost:
						believed = sent.Add(tc.ttl)
					case err == nil && !ok:
						lost = true
					}
					mu.Unlock()
				}
			})

			if tc.kill {
				s.Kill(t)
			} else {
				s.Stop(t)
			}
			time.Sleep(tc.outage)
			s.Restart(t)

			// Wait for the holder's first answer after the restart.
			deadline := time.Now().Add(5 * time.Second)
			for {
				mu.Lock()
				done := lost || believed.After(time.Now().Add(tc.ttl/2))
				mu.Unlock()
				if done || time.Now().After(deadline) {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}

			// A contender tries to take the lease. If it wins, the holder
			// must no longer believe it holds the lease.
			r := mustAcquire(t, b, "job", "contender", tc.ttl)
			mu.Lock()
			holderBelieves, holderLost := !lost && believed.After(time.Now()), lost
			mu.Unlock()
			close(stop)
			wg.Wait()
			after := mustInspect(t, b, "job")
			if r.Acquired {
				if holderBelieves {
					t.Fatalf("contender acquired %+v while the holder still believed it held the lease", r)
				}
				if r.Token <= before.Token {
					t.Fatalf("contender's token %d, want > %d (fencing counter lost?)", r.Token, before.Token)
				}
				if mustRenew(t, b, "job", "holder", tc.ttl) || mustTransfer(t, b, "job", "holder", "x", tc.ttl) {
					t.Fatal("old holder renewed or transferred the contender's lease")
				}
				mustRelease(t, b, "job", "holder")
				if got := mustOwner(t, b, "job"); got != "contender" {
					t.Fatalf("owner after the old holder's release = %q, want contender", got)
				}
				t.Logf("lease lost in the outage; holder saw loss=%v; new token %d > %d", holderLost, r.Token, before.Token)
				if tc.outage == 0 {
					t.Errorf("lease lost across a restart shorter than its TTL, want kept with AOF")
				}
				return
			}
			if r.Owner != "holder" || r.Token != before.Token || after != (lease.Info{Key: "job", Owner: "holder", Token: before.Token, TTL: after.TTL}) {
				t.Fatalf("after restart: contender saw %+v, inspect %+v; want held by holder with token %d", r, after, before.Token)
			}
			if !mustRenew(t, b, "job", "holder", tc.ttl) {
				t.Fatal("holder cannot renew the lease it kept")
			}
			if tc.outage > tc.ttl {
				t.Errorf("lease kept across an outage longer than its TTL")
			}
		})
	}
}
