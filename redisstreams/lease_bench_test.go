package redisstreams

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/lease"
)

const benchTTL = 30 * time.Second

// benchParallelism makes RunParallel use 16 goroutines.
func benchParallelism() int { return max(1, 16/runtime.GOMAXPROCS(0)) }

func benchClient(b *testing.B) *redis.Client {
	s := redistest.Start(b, redistest.Options{})
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), PoolSize: 32})
	b.Cleanup(func() { c.Close() })
	return c
}

var benchSeq atomic.Int64

// BenchmarkLeaseCycle measures AcquireLease + ReleaseLease (two round trips)
// from 16 goroutines, each on its own key, against a private redis-server.
// Compare with BenchmarkRawLeaseCycle.
func BenchmarkLeaseCycle(b *testing.B) {
	c := benchClient(b)
	be, err := New(c, Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { be.Close() })
	b.SetParallelism(benchParallelism())
	leaseCycles(b, be)
}

// BenchmarkLeaseCycleCancelable is BenchmarkLeaseCycle on a ctx that can
// be cancelled, as a request's ctx can: the calls that lead a coalesced
// batch send it from a goroutine of their own (runLease), so that they
// return when ctx ends.
func BenchmarkLeaseCycleCancelable(b *testing.B) {
	c := benchClient(b)
	be, err := New(c, Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { be.Close() })
	b.SetParallelism(benchParallelism())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	leaseCyclesCtx(ctx, b, be)
}

// leaseCycles runs acquire + release cycles on be, each parallel caller on
// a key of its own, from b's timer reset on.
func leaseCycles(b *testing.B, be *Backend) {
	leaseCyclesCtx(context.Background(), b, be)
}

// leaseCyclesCtx is leaseCycles on ctx.
func leaseCyclesCtx(ctx context.Context, b *testing.B, be *Backend) {
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		id := benchSeq.Add(1)
		key, owner := fmt.Sprintf("cycle-%d", id), fmt.Sprintf("owner-%d", id)
		for pb.Next() {
			r, err := be.AcquireLease(ctx, key, owner, benchTTL)
			if err != nil || !r.Acquired {
				b.Errorf("acquire = %+v, %v", r, err)
				return
			}
			if err := be.ReleaseLease(ctx, key, owner); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkLeaseCycleSerial measures AcquireLease + ReleaseLease from one
// goroutine, so every script takes the direct (uncoalesced) path, on
// context.Background (it cannot end) and on a ctx that can be cancelled
// (TestCancelledCallOnStalledServer: the call then returns when ctx ends).
// Each op is one cycle of each, alternating, on one server and client, so
// that the two differ only in the ctx; it reports the time of each
// (ns/cycle-background, ns/cycle-cancelable).
func BenchmarkLeaseCycleSerial(b *testing.B) {
	c := benchClient(b)
	be, err := New(c, Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { be.Close() })
	cancelable, cancel := context.WithCancel(context.Background())
	defer cancel()
	id := benchSeq.Add(1)
	key, owner := fmt.Sprintf("serial-%d", id), fmt.Sprintf("owner-%d", id)
	cycle := func(ctx context.Context) time.Duration {
		start := time.Now()
		r, err := be.AcquireLease(ctx, key, owner, benchTTL)
		if err != nil || !r.Acquired {
			b.Fatalf("acquire = %+v, %v", r, err)
		}
		if err := be.ReleaseLease(ctx, key, owner); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	var bg, cc time.Duration
	n := 0
	for b.Loop() {
		if n%2 == 0 { // which goes first alternates too
			bg += cycle(context.Background())
			cc += cycle(cancelable)
		} else {
			cc += cycle(cancelable)
			bg += cycle(context.Background())
		}
		n++
	}
	b.ReportMetric(float64(bg.Nanoseconds())/float64(n), "ns/cycle-background")
	b.ReportMetric(float64(cc.Nanoseconds())/float64(n), "ns/cycle-cancelable")
}

// rawRelease is the compare-and-delete of the plain go-redis baseline.
var rawRelease = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)

// BenchmarkRawLeaseCycle is the baseline of BenchmarkLeaseCycle written with
// plain go-redis, as a hand-rolled lock would be: SET NX PX of a random
// token, then a Lua compare-and-delete. It has no fencing counter and does
// not report the holder.
func BenchmarkRawLeaseCycle(b *testing.B) {
	c := benchClient(b)
	ctx := context.Background()
	b.SetParallelism(benchParallelism())
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		id := benchSeq.Add(1)
		key, token := fmt.Sprintf("raw-%d", id), fmt.Sprintf("token-%d", id)
		for pb.Next() {
			ok, err := c.SetNX(ctx, key, token, benchTTL).Result()
			if err != nil || !ok {
				b.Errorf("SET NX = %v, %v", ok, err)
				return
			}
			if err := rawRelease.Run(ctx, c, []string{key}, token).Err(); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// rawScriptAcquire is SET NX PX run as a one-line script.
var rawScriptAcquire = redis.NewScript(`return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])`)

// BenchmarkRawScriptLeaseCycle is BenchmarkRawLeaseCycle with its SET NX PX
// run as a one-line Lua script. It isolates what leasebus pays for doing its
// acquire (owner check, fencing counter) atomically in a script: compare it
// with both cycles above.
func BenchmarkRawScriptLeaseCycle(b *testing.B) {
	c := benchClient(b)
	ctx := context.Background()
	ms := benchTTL.Milliseconds()
	b.SetParallelism(benchParallelism())
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		id := benchSeq.Add(1)
		key, token := fmt.Sprintf("rawscript-%d", id), fmt.Sprintf("token-%d", id)
		for pb.Next() {
			if err := rawScriptAcquire.Run(ctx, c, []string{key}, token, ms).Err(); err != nil {
				b.Errorf("SET NX script: %v", err)
				return
			}
			if err := rawRelease.Run(ctx, c, []string{key}, token).Err(); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkRenew10k renews 10,000 leases with one RenewLeases call and
// reports the round trips it took (roundtrips/op).
func BenchmarkRenew10k(b *testing.B) {
	c := benchClient(b)
	be, err := New(c, Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { be.Close() })
	reqs := acquireMany(b, be, 10_000)
	hook := &redistest.RoundTrips{}
	c.AddHook(hook)
	ctx := context.Background()
	b.ResetTimer()
	for b.Loop() {
		ok, err := be.RenewLeases(ctx, reqs)
		if err != nil {
			b.Fatal(err)
		}
		if !ok[len(ok)-1] {
			b.Fatal("lease not renewed")
		}
	}
	b.ReportMetric(float64(hook.N())/float64(b.N), "roundtrips/op")
}

// acquireMany acquires n leases for owner "me" (in pipelines, as a setup
// shortcut) and returns the renewals of all of them.
func acquireMany(tb testing.TB, be *Backend, n int) []lease.Renewal {
	tb.Helper()
	ctx := context.Background()
	reqs := make([]lease.Renewal, n)
	for i := range reqs {
		reqs[i] = lease.Renewal{Key: fmt.Sprintf("many-%d", i), Owner: "me", TTL: benchTTL}
	}
	calls := make([]*leaseCall, n)
	for i, r := range reqs {
		calls[i] = newCall(ctx, acquireScript, []string{be.keys.Lease(r.Key), be.keys.Fence(r.Key), be.keys.LeaseState(r.Key), be.keys.LeaseRevoked(r.Key)},
			"me", ttlMillis(benchTTL), be.statusWindowMillis(), be.fenceIdleMillis())
	}
	if err := be.runPipelined(ctx, calls); err != nil {
		tb.Fatal(err)
	}
	for _, c := range calls {
		if tok, err := c.cmd.Int64(); err != nil || tok <= 0 {
			tb.Fatalf("acquire = %v, %v; want a first tenure's token", tok, err)
		}
	}
	return reqs
}

// TestLeaseRenew10kRoundTrips checks the batch target: renewing 10,000
// leases on one server takes at most 20 round trips the first time (the
// renew script not cached yet, connections of the pool being opened, each
// counted), and at most 10 once warm.
func TestLeaseRenew10kRoundTrips(t *testing.T) {
	s := redistest.Start(t, redistest.Options{})
	c := s.Client(t)
	be := newBackendOn(t, c)
	reqs := acquireMany(t, be, 10_000)
	hook := &redistest.RoundTrips{}
	c.AddHook(hook)
	for i, limit := range []int64{20, 10, 10} {
		hook.Reset()
		ok, err := be.RenewLeases(t.Context(), reqs)
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range ok {
			if !v {
				t.Fatalf("renewal %d = false", i)
			}
		}
		if n := hook.N(); n > limit {
			t.Fatalf("renewal %d of 10,000 leases took %d round trips, want <= %d", i+1, n, limit)
		} else {
			t.Logf("renewal %d of 10,000 leases took %d round trips", i+1, n)
		}
	}
}

// TestLeaseRing runs the lease checks on a Ring of two servers, where
// RenewLeases sends one lease per script because two keys may live on
// different shards.
func TestLeaseRing(t *testing.T) {
	a := redistest.Start(t, redistest.Options{})
	z := redistest.Start(t, redistest.Options{})
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": a.Addr(), "z": z.Addr()}})
	t.Cleanup(func() { ring.Close() })
	leaseEnv{new: func(t *testing.T) *Backend { return newBackendOn(t, ring) }, ttl: 200 * time.Millisecond}.run(t)
}
