package redisstreams

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/lease"
)

func TestLeaseSyncOptions(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { c.Close() })
	for _, o := range []Options{{LeaseSyncReplicas: -1}, {LeaseSyncTimeout: -time.Second}, {LeaseSyncReplicas: 1, LeaseSyncTimeout: time.Microsecond}} {
		if _, err := New(c, o); !errors.Is(err, ErrInvalid) {
			t.Errorf("New(%+v) = %v, want ErrInvalid", o, err)
		}
	}
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}})
	t.Cleanup(func() { ring.Close() })
	if _, err := New(ring, Options{LeaseSyncReplicas: 1}); !errors.Is(err, ErrInvalid) {
		t.Errorf("New(ring, LeaseSyncReplicas 1) = %v, want ErrInvalid naming the client", err)
	}
}

// TestLeaseSyncNeverWinsUnreplicated: with LeaseSyncReplicas set, an
// acquire or transfer that cannot reach the replicas returns an error, never
// a win — on a server with no replica, and with the replica paused — and
// LeaseSyncAOF on a server without WAITAOF (Redis 7.0) does the same.
func TestLeaseSyncNeverWinsUnreplicated(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	for _, o := range []Options{{LeaseSyncReplicas: 1, LeaseSyncTimeout: 50 * time.Millisecond}, {LeaseSyncAOF: true}} {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		t.Cleanup(func() { c.Close() })
		o.Prefix = "sync-none"
		b, err := New(c, o)
		if err != nil {
			t.Fatal(err)
		}
		r, err := b.AcquireLease(t.Context(), "k", "a", time.Minute)
		if err == nil {
			t.Fatalf("%+v without a replica: AcquireLease = %+v, nil; want an error, never a win", o, r)
		}
		t.Logf("%+v without a replica: %v", o, err)
		_ = b.ReleaseLease(t.Context(), "k", "a")
	}

	st := redistest.StartSentinel(t, 1)
	b := syncBackend(t, st, 1)
	// The replica may still be syncing right after the start.
	for start := time.Now(); ; time.Sleep(50 * time.Millisecond) {
		r, err := b.AcquireLease(t.Context(), "k", "a", time.Minute)
		if err == nil && r.Acquired {
			break
		}
		if time.Since(start) > redistest.ReadyTimeout {
			t.Fatalf("AcquireLease with a live replica = %+v, %v; want a win", r, err)
		}
	}
	if ok, err := b.TransferLease(t.Context(), "k", "a", "b", time.Minute); err != nil || !ok {
		t.Fatalf("TransferLease with a live replica = %v, %v; want true", ok, err)
	}
	replica := replicaOf(t, st)
	replica.Pause(t)
	r, err := b.AcquireLease(t.Context(), "k2", "a", time.Minute)
	if err == nil {
		t.Fatalf("AcquireLease with the replica paused = %+v, nil; want an error, never a win", r)
	}
	ok, err := b.TransferLease(t.Context(), "k", "b", "c", time.Minute)
	if err == nil {
		t.Fatalf("TransferLease with the replica paused = %v, nil; want an error, never a win", ok)
	}
	replica.Resume(t)
}

// TestLeaseSyncFailover acquires and releases one key over and over on a
// Sentinel deployment of a master and two replicas, with LeaseSyncReplicas
// 2 (every replica) and a failover client of go-redis's default options,
// while the master is killed and a replica promoted; the killed node is
// then restarted and rejoins as a replica, so that two replicas can
// acknowledge again. Every token a caller was told it won is greater than
// every earlier one — none is handed out twice across the failover. Each
// attempt uses a new owner, so every win is a new tenure (a re-acquire by
// the same owner keeps its token by contract). Without the option, the same
// scenario handed tokens out again in 2 of 3 runs: once an old master
// restarted empty answered as master for a moment.
func TestLeaseSyncFailover(t *testing.T) {
	st := redistest.StartSentinel(t, 2)
	b := syncBackend(t, st, 2)
	ctx := t.Context()
	var (
		mu     sync.Mutex
		tokens []uint64
		errs   int
		stop   = make(chan struct{})
		done   = make(chan struct{})
	)
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			// A new owner per attempt, so that every win is a new tenure
			// (a re-acquire by the same owner keeps its token by contract,
			// as it would after a release lost in the failover).
			owner := fmt.Sprint("a", i)
			r, err := b.AcquireLease(ctx, "fenced", owner, time.Second)
			if err != nil {
				mu.Lock()
				errs++
				mu.Unlock()
				time.Sleep(10 * time.Millisecond)
				continue
			}
			if r.Acquired {
				mu.Lock()
				tokens = append(tokens, r.Token)
				mu.Unlock()
			}
			_ = b.ReleaseLease(ctx, "fenced", owner)
		}
	}()
	wins := func() int { mu.Lock(); defer mu.Unlock(); return len(tokens) }
	waitWins := func(n int) {
		deadline := time.Now().Add(redistest.FailoverTimeout)
		for wins() < n {
			if time.Now().After(deadline) {
				t.Fatalf("only %d wins, want %d", wins(), n)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitWins(50)
	before := wins()
	old := st.Master()
	st.Failover(t)
	old.Restart(t) // the sentinel makes it a replica of the new master
	waitWins(before + 50)
	close(stop)
	<-done
	mu.Lock()
	defer mu.Unlock()
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("token %d won after token %d (win %d of %d): handed out again across the failover", tokens[i], tokens[i-1], i, len(tokens))
		}
	}
	t.Logf("%d wins (%d before the failover), tokens %d..%d strictly increasing, %d errors during the failover", len(tokens), before, tokens[0], tokens[len(tokens)-1], errs)
}

func syncBackend(t *testing.T, st *redistest.Sentinel, replicas int) *Backend {
	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: st.MasterName(), SentinelAddrs: st.SentinelAddrs()})
	t.Cleanup(func() { c.Close() })
	b, err := New(c, Options{Prefix: psPrefix(), LeaseSyncReplicas: replicas, LeaseSyncTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func replicaOf(t *testing.T, st *redistest.Sentinel) *redistest.Server {
	for _, n := range st.Nodes() {
		if n != st.Master() {
			return n
		}
	}
	t.Fatal("no replica")
	return nil
}

// BenchmarkLeaseSync measures what LeaseSyncReplicas costs: an acquire +
// release cycle on a master with one replica, without and with the option,
// one caller and 16 concurrent callers (the sub-benchmarks alternate).
func BenchmarkLeaseSync(b *testing.B) {
	st := redistest.StartSentinel(b, 1)
	c := redis.NewClient(&redis.Options{Addr: st.Master().Addr()})
	b.Cleanup(func() { c.Close() })
	for _, par := range []int{1, 16} {
		for _, replicas := range []int{0, 1} {
			b.Run(fmt.Sprintf("callers=%d/LeaseSyncReplicas=%d", par, replicas), func(b *testing.B) {
				be, err := New(c, Options{Prefix: psPrefix(), LeaseSyncReplicas: replicas, Logger: slog.New(slog.DiscardHandler)})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { be.Close() })
				b.SetParallelism(max(1, par/runtime.GOMAXPROCS(0)))
				leaseCycles(b, be)
			})
		}
	}
}

// BenchmarkLeaseSyncRenew10k measures what LeaseSyncReplicas costs
// renewals: one RenewLeases of 10,000 held leases on a master with one
// replica, without and with the option, one after the other.
func BenchmarkLeaseSyncRenew10k(b *testing.B) {
	st := redistest.StartSentinel(b, 1)
	c := redis.NewClient(&redis.Options{Addr: st.Master().Addr()})
	b.Cleanup(func() { c.Close() })
	for _, replicas := range []int{0, 1} {
		b.Run(fmt.Sprintf("LeaseSyncReplicas=%d", replicas), func(b *testing.B) {
			be, err := New(c, Options{Prefix: psPrefix(), LeaseSyncReplicas: replicas, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { be.Close() })
			reqs := acquireMany(b, be, 10_000)
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
		})
	}
}

// TestLeaseSyncRenewals: with LeaseSyncReplicas set, a renewal counts only
// once the replicas have it. With the replica paused, RenewLease returns an
// error (never true), RenewLeases reports each held lease's request as
// failed in its *lease.BatchError (and a lease not held as a plain false),
// and a lease kept by lease.Keep is lost at its deadline (it fails closed
// before a promoted replica, which never saw the renewals, lets the lease
// go). With the replica running, all three renew. Before, renewals did not
// wait for the replicas: a renewal lost in a failover left the holder
// believing in a deadline later than the one the new master kept.
func TestLeaseSyncRenewals(t *testing.T) {
	st := redistest.StartSentinel(t, 1)
	b := syncBackend(t, st, 1)
	ctx := t.Context()
	held := []string{"r0", "r1", "r2"}
	for _, k := range held {
		for start := time.Now(); ; time.Sleep(50 * time.Millisecond) { // the replica may still be syncing
			r, err := b.AcquireLease(ctx, k, "a", time.Minute)
			if err == nil && r.Acquired {
				break
			}
			if time.Since(start) > redistest.ReadyTimeout {
				t.Fatalf("AcquireLease(%s) with a live replica = %+v, %v; want a win", k, r, err)
			}
		}
	}
	reqs := []lease.Renewal{{Key: "r0", Owner: "a", TTL: time.Minute}, {Key: "r1", Owner: "a", TTL: time.Minute}, {Key: "free", Owner: "a", TTL: time.Minute}, {Key: "r2", Owner: "a", TTL: time.Minute}}
	if ok, err := b.RenewLease(ctx, "r0", "a", time.Minute); err != nil || !ok {
		t.Fatalf("RenewLease with a live replica = %v, %v; want true", ok, err)
	}
	if out, err := b.RenewLeases(ctx, reqs); err != nil || !out[0] || !out[1] || out[2] || !out[3] {
		t.Fatalf("RenewLeases with a live replica = %v, %v; want [true true false true], nil", out, err)
	}
	kept, err := lease.Keep(ctx, b, "kept", "a", 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer kept.Release(context.Background())

	replica := replicaOf(t, st)
	replica.Pause(t)
	paused := time.Now()
	ok, err := b.RenewLease(ctx, "r0", "a", time.Minute)
	if err == nil || ok {
		t.Errorf("RenewLease with the replica paused = %v, %v; want an error, never true", ok, err)
	} else {
		t.Logf("RenewLease with the replica paused: %v", err)
	}
	out, err := b.RenewLeases(ctx, reqs)
	var be *lease.BatchError
	switch {
	case !errors.As(err, &be):
		t.Errorf("RenewLeases with the replica paused = %v, %v; want a *lease.BatchError", out, err)
	default:
		for i, want := range []bool{true, true, false, true} {
			if out[i] {
				t.Errorf("RenewLeases with the replica paused: request %d (%s) reported renewed", i, reqs[i].Key)
			}
			if got := be.Errs[i] != nil; got != want {
				t.Errorf("RenewLeases with the replica paused: request %d (%s) error %v, want one: %v", i, reqs[i].Key, be.Errs[i], want)
			}
		}
	}
	// The kept lease: its renewals fail from the pause on, so it is lost
	// by its deadline (2s TTL from its last renewal before the pause).
	select {
	case <-kept.Done():
		t.Logf("kept lease lost %v after the pause: %v", time.Since(paused).Round(time.Millisecond), kept.Err())
	case <-time.After(10 * time.Second):
		t.Errorf("a lease kept by lease.Keep survived 10s of a paused replica (TTL 2s): its renewals were reported done unreplicated")
	}
	replica.Resume(t)
	for start := time.Now(); ; time.Sleep(50 * time.Millisecond) {
		ok, err := b.RenewLease(ctx, "r0", "a", time.Minute)
		if err == nil && ok {
			break
		}
		if time.Since(start) > redistest.ReadyTimeout {
			t.Fatalf("RenewLease after the replica resumed = %v, %v; want true", ok, err)
		}
	}
}

// TestTransferRetryCoveredByWait (review revW's finding 4): a transfer that
// go-redis sends again after losing its reply finds the transfer done and
// reports it (transfer.lua's retry branch), on a new connection. With
// LeaseSyncReplicas the WAIT after it must cover the transfer it repeats:
// the retry writes (the state record's nonce, unchanged), so that the
// connection's last write is after that transfer. Here the replica is
// paused before the transfer, so it never got it: WAIT after the retry
// must count 0 replicas, not 1. WAIT's documented contract covers "the
// write commands sent in the context of the current connection"; the
// 7.0.15 here answers 0 even when the retry writes nothing (also before
// the retry wrote), so what fails here without the write is the direct
// check: the retry moves the master's replication offset.
func TestTransferRetryCoveredByWait(t *testing.T) {
	st := redistest.StartSentinel(t, 1)
	b := psBackend(t, st.Client(t), Options{})
	ctx := t.Context()
	if _, err := b.AcquireLease(ctx, "k", "A", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	m := st.Master().Client(t)
	awaitSyncedClient(t, m)
	keys := []string{b.keys.Lease("k"), b.keys.Fence("k"), b.keys.LeaseState("k"), b.keys.LeaseRevoked("k")}
	args := []any{"A", "B", 10000, b.statusWindowMillis(), b.fenceIdleMillis(), "nonce1"}
	replica := replicaOf(t, st)
	replica.Pause(t)
	defer replica.Resume(t)
	first := m.Conn()
	defer first.Close()
	tok, err := first.Eval(ctx, transferLua, keys, args...).Int64()
	if err != nil || tok <= 0 {
		t.Fatalf("transfer: %d, %v", tok, err)
	}
	retry := m.Conn() // a new connection, as go-redis's retry takes
	defer retry.Close()
	before := replOffset(t, m)
	again, err := retry.Eval(ctx, transferLua, keys, args...).Int64()
	if err != nil || again != tok {
		t.Fatalf("the retried transfer: %d, %v (want %d)", again, err, tok)
	}
	if after := replOffset(t, m); after <= before {
		t.Errorf("the retried transfer propagated nothing (master_repl_offset %d, then %d): a WAIT on its connection need not cover the transfer it repeats", before, after)
	}
	n, err := retry.Do(ctx, "WAIT", 1, 300).Int64()
	if err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("WAIT after the retried transfer counted %d replicas; the paused replica never got the transfer: the retry's WAIT does not cover it", n)
	}
}

// replOffset returns the master_repl_offset of c's server.
func replOffset(t *testing.T, c *redis.Client) int64 {
	t.Helper()
	info, err := c.Info(t.Context(), "replication").Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "master_repl_offset:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no master_repl_offset in %q", info)
	return 0
}

// awaitSyncedClient waits until a WAIT on c's server counts one replica.
func awaitSyncedClient(t *testing.T, c *redis.Client) {
	t.Helper()
	deadline := time.Now().Add(redistest.ReadyTimeout)
	for {
		if err := c.Set(t.Context(), "sync-probe", "1", 0).Err(); err == nil {
			if n, err := c.Do(t.Context(), "WAIT", 1, 200).Int64(); err == nil && n >= 1 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("no replica acknowledged a write")
		}
	}
}
