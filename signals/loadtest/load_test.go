package loadtest_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

// readingConnsBound is the most Redis connections a runtime may hold blocked
// in a read, whatever the number of active threads: on a standalone server,
// the Backend's one shared reader (its XREAD covers the work topic for the
// group subscription's bell, the wake-notice watch and the control topic).
const readingConnsBound = 1

// activeLoad is what runActiveThreads measured.
type activeLoad struct {
	threads        int
	signals        int           // signals sent (threads × 3)
	ran            int           // distinct signals the agents took
	dups           int           // signals taken more than once
	leaseLost      int64         // LeaseLost events
	firstLost      string        // the first LeaseLost's cause and when, from the first Send
	poolTimeouts   uint32        // go-redis pool timeouts of the runtime's client (every node's pools, the pipeline pools too)
	poolSize       int           // the client's PoolSize (go-redis default; per node on a Cluster)
	connCap        int           // PoolSize + the pipeline pool's size: go-redis's ceiling (per node)
	blockedBound   int           // most connections a node may see blocked in a read
	maxBlocked     int           // most connections one node saw blocked in a read (CLIENT LIST flag b)
	maxConns       int           // most connections of the runtime's client one node saw at once
	nodes          []nodeLoad    // per node (one on a standalone server)
	allActive      time.Duration // first Send → every thread's run active at once
	followUps      time.Duration // sending the follow-ups → every follow-up taken
	sendsPerSecond float64       // follow-up sends per second while every thread was active
	maxSchedLag    time.Duration // most a 10ms sleep of the test process overran (CPU starvation)
}

// nodeLoad is what runActiveThreads measured on one Redis node.
type nodeLoad struct {
	addr             string
	poolTimeouts     uint32        // main pool's and pipeline pool's timeouts of the runtime's client for this node
	maxBlocked       int           // most connections seen blocked in a read, over the whole run
	maxBlockedActive int           // the same, sampled only while every thread was active
	maxConns         int           // most connections seen at once
	poolWaits        uint32        // calls that waited for a connection of the main pool
	poolWait         time.Duration // their total wait
}

// loadTarget is the Redis deployment runActiveThreadsOn loads: the
// runtime's Backend and, per node, what to sample.
type loadTarget struct {
	b            *redisstreams.Backend
	nodes        []loadNode
	poolSize     int // per node
	connCap      int // per node
	blockedBound int // per node
}

type loadNode struct {
	addr  string
	admin redis.Cmdable                   // CLIENT LIST on this node only
	stats func() (*redis.PoolStats, bool) // the runtime's client's pool stats for this node
}

// poolTimeouts is the main and pipeline pools' timeouts in s.
func poolTimeouts(s *redis.PoolStats) uint32 {
	t := s.Timeouts
	if s.PipelineStats != nil {
		t += s.PipelineStats.Timeouts
	}
	return t
}

// standaloneTarget starts a standalone server and a Backend on a NewURL
// client (go-redis's default pool: 10 connections per GOMAXPROCS).
func standaloneTarget(tb testing.TB) loadTarget {
	tb.Helper()
	redistest.Require(tb)
	srv := redistest.Start(tb, redistest.Options{})
	b, err := redisstreams.NewURL(context.Background(), srv.URL(), redisstreams.Options{Prefix: "load"})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = b.Close() })
	c := b.Client().(*redis.Client)
	o := c.Options()
	pipe := o.PipelinePoolSize
	if pipe == 0 {
		pipe = redis.DefaultPipelinePoolSize
	}
	return loadTarget{
		b: b,
		nodes: []loadNode{{addr: srv.Addr(), admin: srv.Client(tb), stats: func() (*redis.PoolStats, bool) {
			return c.PoolStats(), true
		}}},
		poolSize: o.PoolSize, connCap: o.PoolSize + max(pipe, 0), blockedBound: readingConnsBound,
	}
}

// runActiveThreads is runActiveThreadsOn a standalone server.
func runActiveThreads(tb testing.TB, n int) activeLoad {
	tb.Helper()
	return runActiveThreadsOn(tb, n, standaloneTarget(tb))
}

// runActiveThreadsOn starts one runtime on tgt's Backend and makes n threads
// active at once: each thread's first signal starts a run that waits until
// every thread's run has started, then takes two follow-ups through
// Run.Next, sent by the test while all n runs are active. It samples CLIENT
// LIST on every node meanwhile. The runs stay active at least two lease
// TTLs (renewals under load).
func runActiveThreadsOn(tb testing.TB, n int, tgt loadTarget) activeLoad {
	tb.Helper()
	ctx := context.Background()
	b := tgt.b
	const ttl = 3 * time.Second
	var (
		started   atomic.Int64
		allIn     = make(chan struct{})
		release   = make(chan struct{})
		mu        sync.Mutex
		taken     = make(map[string]int, 3*n)
		leaseLost atomic.Int64
		lostOnce  sync.Once
		firstLost string
		t0        = time.Now()
		tookAll   = make(chan struct{})
	)
	take := func(id string) {
		mu.Lock()
		defer mu.Unlock()
		taken[id]++
		if len(taken) == 3*n && taken[id] == 1 {
			close(tookAll)
		}
	}
	agent := func(ctx context.Context, run *signals.Run) error {
		got := 0
		for _, s := range run.Signals {
			take(s.ID)
			got++
		}
		if started.Add(1) == int64(n) {
			close(allIn)
		}
		select {
		case <-allIn:
		case <-ctx.Done():
			return ctx.Err()
		}
		for got < 3 {
			s, ok := run.Next(ctx)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if ok {
				take(s.ID)
				got++
			}
		}
		select { // stay active until the test has sampled
		case <-release:
		case <-ctx.Done():
		}
		return nil
	}
	// Next waits for the follow-ups (a run that polled Next every 20ms, the
	// default next wait, would make 10,000 runs spin 500,000 times a
	// second: the CPU, not Redis, would then starve the renewals).
	rt, err := signals.New(b, agent, signals.WithLeaseTTL(ttl), signals.WithNextWait(time.Minute), signals.WithObserver(func(e signals.Event) {
		if e.Kind == signals.LeaseLost {
			leaseLost.Add(1)
			lostOnce.Do(func() {
				mu.Lock()
				firstLost = fmt.Sprintf("%v at +%v (%d signals taken)", e.Err, time.Since(t0).Round(time.Millisecond), len(taken))
				mu.Unlock()
			})
		}
	}))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := rt.Close(ctx); err != nil {
			tb.Errorf("Close: %v", err)
		}
	})
	res := activeLoad{threads: n, signals: 3 * n, poolSize: tgt.poolSize, connCap: tgt.connCap, blockedBound: tgt.blockedBound}

	// Only the sampler goroutine writes these; they are read after it ended.
	nodes := make([]nodeLoad, len(tgt.nodes))
	for i, nd := range tgt.nodes {
		nodes[i].addr = nd.addr
	}
	sample := func() {
		active := false
		select {
		case <-allIn:
			active = true
		default:
		}
		for i, nd := range tgt.nodes {
			conns, blocked, err := redistest.ClientStats(ctx, nd.admin)
			if err != nil {
				tb.Errorf("CLIENT LIST on %s: %v", nd.addr, err)
				return
			}
			nodes[i].maxBlocked, nodes[i].maxConns = max(nodes[i].maxBlocked, blocked), max(nodes[i].maxConns, conns)
			if active {
				nodes[i].maxBlockedActive = max(nodes[i].maxBlockedActive, blocked)
			}
		}
	}
	stopSampling := make(chan struct{})
	var sampler sync.WaitGroup
	var maxLag time.Duration // written by the probe only, read after it ended
	sampler.Go(func() {
		for {
			select {
			case <-stopSampling:
				return
			default:
			}
			t := time.Now()
			time.Sleep(10 * time.Millisecond)
			maxLag = max(maxLag, time.Since(t)-10*time.Millisecond)
		}
	})
	sampler.Go(func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			sample()
			select {
			case <-stopSampling:
				return
			case <-tick.C:
			}
		}
	})

	send := func(round int) {
		var g errgroup.Group
		g.SetLimit(16)
		for i := range n {
			g.Go(func() error {
				thread := fmt.Sprint("load-", i)
				_, err := rt.Send(ctx, thread, signals.Signal{ID: fmt.Sprintf("%s/%d", thread, round), Type: "msg"})
				return err
			})
		}
		if err := g.Wait(); err != nil {
			tb.Fatalf("send round %d: %v", round, err)
		}
	}
	wait := func(ch <-chan struct{}, what string, d time.Duration) {
		tb.Helper()
		select {
		case <-ch:
		case <-time.After(d):
			mu.Lock()
			k := len(taken)
			mu.Unlock()
			tb.Fatalf("%s: not within %v (%d runs started, %d signals taken)", what, d, started.Load(), k)
		}
	}
	start := time.Now()
	t0 = start
	send(0)
	wait(allIn, fmt.Sprintf("all %d threads active at once", n), 5*time.Minute)
	res.allActive = time.Since(start)
	fuStart := time.Now()
	send(1)
	send(2)
	res.sendsPerSecond = float64(2*n) / time.Since(fuStart).Seconds()
	wait(tookAll, "every follow-up taken", 5*time.Minute)
	res.followUps = time.Since(fuStart)
	// Hold every run active for two TTLs more: renewals under load.
	time.Sleep(2 * ttl)
	close(stopSampling)
	sampler.Wait()
	close(release)

	mu.Lock()
	res.ran = len(taken)
	for _, c := range taken {
		if c > 1 {
			res.dups++
		}
	}
	mu.Unlock()
	res.leaseLost = leaseLost.Load()
	mu.Lock()
	res.firstLost = firstLost
	res.maxSchedLag = maxLag
	mu.Unlock()
	for i, nd := range tgt.nodes {
		if st, ok := nd.stats(); ok {
			nodes[i].poolTimeouts = poolTimeouts(st)
			nodes[i].poolWaits, nodes[i].poolWait = st.WaitCount, time.Duration(st.WaitDurationNs)
		} else {
			tb.Errorf("no pool of the runtime's client for node %s", nd.addr)
		}
		res.poolTimeouts += nodes[i].poolTimeouts
		res.maxBlocked, res.maxConns = max(res.maxBlocked, nodes[i].maxBlocked), max(res.maxConns, nodes[i].maxConns)
	}
	res.nodes = nodes
	return res
}

// TestThousandActiveThreadsDefaultPool: 1,000 threads active at once in one
// process whose client is go-redis's default (NewURL: a pool of 10 per
// GOMAXPROCS). Every signal runs exactly once, no lease is lost, the pool
// never times out, and the connections blocked in reads stay at
// readingConnsBound whatever the number of threads (each active thread used
// to hold one for its inbox).
func TestThousandActiveThreadsDefaultPool(t *testing.T) {
	n := 1000
	if testing.Short() {
		n = 200
	}
	r := runActiveThreads(t, n)
	t.Logf("%d threads active at once %v after the first Send; %d follow-ups taken in %v (%.0f sends/s); pool %d: %d timeouts; connections: at most %d, at most %d blocked in a read; %d lease losses; a 10ms sleep overran by up to %v",
		r.threads, r.allActive.Round(time.Millisecond), 2*r.threads, r.followUps.Round(time.Millisecond), r.sendsPerSecond,
		r.poolSize, r.poolTimeouts, r.maxConns, r.maxBlocked, r.leaseLost, r.maxSchedLag.Round(time.Millisecond))
	checkActiveLoad(t, r)
}

// checkActiveLoad fails tb unless every signal of r was taken exactly once,
// no lease was lost, the pool never timed out and the connections stayed
// within their bounds.
func checkActiveLoad(tb testing.TB, r activeLoad) {
	tb.Helper()
	if r.ran != r.signals || r.dups != 0 {
		tb.Errorf("%d of %d signals taken, %d more than once; want each exactly once", r.ran, r.signals, r.dups)
	}
	if r.leaseLost != 0 {
		tb.Errorf("%d leases lost under load; the first: %s (all threads active at +%v; a 10ms sleep of this process overran by up to %v)", r.leaseLost, r.firstLost, r.allActive.Round(time.Millisecond), r.maxSchedLag.Round(time.Millisecond))
	}
	if r.poolTimeouts != 0 {
		tb.Errorf("%d pool timeouts on the default pool (%d connections)", r.poolTimeouts, r.poolSize)
	}
	for _, nd := range r.nodes {
		if nd.maxBlocked > r.blockedBound {
			tb.Errorf("%s: %d connections blocked in reads at once, want at most %d whatever the number of threads", nd.addr, nd.maxBlocked, r.blockedBound)
		}
		if nd.maxConns > r.connCap {
			tb.Errorf("%s: %d connections at once, above the client's ceiling %d (pool and pipeline pool)", nd.addr, nd.maxConns, r.connCap)
		}
	}
}

// BenchmarkActiveThreads10000 is runActiveThreads with 10,000 threads, once
// per iteration (run it with -benchtime 1x). It reports the time
// until every thread was active, the follow-up send rate, and what the test
// above asserts, and fails as the test does (checkActiveLoad): it reported
// 3,632-6,000 leases lost without failing before the on-demand
// subscriptions' passes were bounded (redisstreams onDemandPasses).
func BenchmarkActiveThreads10000(b *testing.B) {
	if testing.Short() {
		b.Skip("real-Redis benchmark: skipped under -short")
	}
	for b.Loop() {
		r := runActiveThreads(b, 10_000)
		b.ReportMetric(r.allActive.Seconds(), "s-to-all-active")
		b.ReportMetric(r.sendsPerSecond, "followup-sends/s")
		b.ReportMetric(float64(r.poolTimeouts), "pool-timeouts")
		b.ReportMetric(float64(r.leaseLost), "leases-lost")
		b.ReportMetric(float64(r.maxBlocked), "max-blocked-conns")
		b.ReportMetric(float64(r.maxConns), "max-conns")
		b.ReportMetric(float64(r.signals-r.ran+r.dups), "lost+dup-signals")
		checkActiveLoad(b, r)
	}
}
