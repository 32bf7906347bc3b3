package signals_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

// benchPoolSize is the go-redis PoolSize of every benchmark client. The
// runtime no longer needs it (an active thread holds no connection, and
// TestThousandActiveThreadsDefaultPool and BenchmarkActiveThreads10000 run
// on go-redis's default pool); it stays at 2,000 so that the figures
// compare like for like with those of the design before issue 11, whose
// tenures each pinned one pooled connection and which cannot run these
// benchmarks on the default pool at all. BENCHMARKS.md gives the
// default-pool figures beside them.
const benchPoolSize = 2000

// benchArrival is an agent being given a signal.
type benchArrival struct {
	id string
	at time.Time
}

// benchRuntime starts a Runtime on its own go-redis client (PoolSize
// benchPoolSize) and Backend against srv. Cleanup closes the runtime, the
// backend, then the client.
func benchRuntime(b *testing.B, srv *redistest.Server, id string, agent signals.Agent, opts ...signals.Option) *signals.Runtime {
	b.Helper()
	return benchRuntimeHook(b, srv, id, nil, agent, opts...)
}

// benchRuntimeHook is benchRuntime with hook (when not nil) added to the
// client before any use.
func benchRuntimeHook(b *testing.B, srv *redistest.Server, id string, hook redis.Hook, agent signals.Agent, opts ...signals.Option) *signals.Runtime {
	b.Helper()
	return benchRuntimeWith(b, srv, id, hook, redisstreams.Options{}, agent, opts...)
}

// benchRuntimeWith is benchRuntimeHook on a backend built with ro.
func benchRuntimeWith(b *testing.B, srv *redistest.Server, id string, hook redis.Hook, ro redisstreams.Options, agent signals.Agent, opts ...signals.Option) *signals.Runtime {
	b.Helper()
	o := srv.ClientOptions()
	o.PoolSize = benchPoolSize
	c := redis.NewClient(o)
	if hook != nil {
		c.AddHook(hook)
	}
	be, err := redisstreams.New(c, ro)
	if err != nil {
		_ = c.Close()
		b.Fatal(err)
	}
	rt, err := signals.New(be, agent, append([]signals.Option{signals.WithProcessID(id)}, opts...)...)
	if err != nil {
		_ = be.Close()
		_ = c.Close()
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := rt.Close(ctx); err != nil {
			b.Errorf("runtime %s Close: %v", id, err)
		}
		if err := be.Close(); err != nil {
			b.Errorf("backend %s Close: %v", id, err)
		}
		_ = c.Close()
	})
	return rt
}

// benchStart skips under -short and starts a private redis-server.
func benchStart(b *testing.B) *redistest.Server {
	b.Helper()
	if testing.Short() {
		b.Skip("real-Redis benchmark: skipped under -short")
	}
	redistest.Require(b)
	return redistest.Start(b, redistest.Options{})
}

// benchAwait waits for the arrival of signal id on got, skipping arrivals of
// other signals (none are expected).
func benchAwait(b *testing.B, got <-chan benchArrival, id string) time.Time {
	b.Helper()
	timeout := time.NewTimer(30 * time.Second)
	defer timeout.Stop()
	for {
		select {
		case a := <-got:
			if a.id == id {
				return a.at
			}
			b.Logf("unexpected arrival of %s while waiting for %s", a.id, id)
		case <-timeout.C:
			b.Fatalf("signal %s did not reach the agent within 30s", id)
		}
	}
}

// benchPercentile returns the q-quantile (nearest rank) of sorted ds.
func benchPercentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// benchReport reports p50/p99 (and max) of the Send→agent latencies and of
// Send's own duration, in µs.
func benchReport(b *testing.B, lat, send []time.Duration) {
	slices.Sort(lat)
	slices.Sort(send)
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	b.ReportMetric(us(benchPercentile(lat, 0.50)), "p50-µs")
	b.ReportMetric(us(benchPercentile(lat, 0.99)), "p99-µs")
	b.ReportMetric(us(benchPercentile(lat, 1)), "max-µs")
	b.ReportMetric(us(benchPercentile(send, 0.50)), "send-p50-µs")
	b.ReportMetric(us(benchPercentile(send, 0.99)), "send-p99-µs")
}

// BenchmarkSendWoke measures Send→agent latency when Send wakes a thread:
// each iteration sends one signal to a fresh thread nobody holds, and waits
// until the run started by it is given the signal (closed loop, one signal in
// flight). p50-µs/p99-µs are Send start → agent given the signal;
// send-p50-µs/send-p99-µs are Send's own duration; redis-rt/op is the Redis
// round trips of the runtime's client per iteration, background work
// included (the run's tenure, its release, the wake notice's handling).
func BenchmarkSendWoke(b *testing.B) {
	srv := benchStart(b)
	got := make(chan benchArrival, 16)
	agent := func(ctx context.Context, run *signals.Run) error {
		now := time.Now()
		for _, s := range run.Signals {
			got <- benchArrival{s.ID, now}
		}
		return nil
	}
	trips := &redistest.RoundTrips{}
	rt := benchRuntimeHook(b, srv, "bench-woke", trips, agent)
	// Warm-up: connections, consumer groups of WorkTopic, the lease script.
	if _, err := rt.Send(b.Context(), "warm", signals.Signal{ID: "warm", Type: "msg"}); err != nil {
		b.Fatal(err)
	}
	benchAwait(b, got, "warm")

	lat := make([]time.Duration, 0, b.N)
	send := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	trips0 := trips.N()
	for i := range b.N {
		id := fmt.Sprint("w", i)
		start := time.Now()
		acc, err := rt.Send(b.Context(), fmt.Sprint("woke-", i), signals.Signal{ID: id, Type: "msg"})
		sent := time.Now()
		if err != nil {
			b.Fatal(err)
		}
		if acc.Action != signals.Woke {
			b.Fatalf("send %d: %+v, want Woke", i, acc)
		}
		at := benchAwait(b, got, id)
		lat = append(lat, at.Sub(start))
		send = append(send, sent.Sub(start))
	}
	b.StopTimer()
	benchReport(b, lat, send)
	b.ReportMetric(float64(trips.N()-trips0)/float64(b.N), "redis-rt/op")
}

// BenchmarkSendForwarded measures Send→agent latency when another runtime
// owns the thread: runtime "owner" (its own client and Backend) holds one
// thread with a run that takes every follow-up with Run.Next, and runtime
// "sender" sends to that thread, one signal in flight at a time. p50-µs/p99-µs
// are sender's Send start → owner's agent given the signal by Run.Next: the
// owner learns of it from the wake notice (its fan-out watch), which goes
// out with the inbox entry in Send's second round trip, and then reads its
// inbox (one more round trip). redis-rt/op is the
// round trips of both runtimes' clients per iteration, background work
// included (the hand-off, the wake notice's handling).
func BenchmarkSendForwarded(b *testing.B) {
	srv := benchStart(b)
	got := make(chan benchArrival, 16)
	ownerAgent := func(ctx context.Context, run *signals.Run) error {
		now := time.Now()
		for _, s := range run.Signals {
			got <- benchArrival{s.ID, now}
		}
		for {
			s, ok := run.Next(ctx)
			if !ok {
				return nil // runtime closing (next wait is an hour)
			}
			got <- benchArrival{s.ID, time.Now()}
		}
	}
	trips := &redistest.RoundTrips{}
	owner := benchRuntimeHook(b, srv, "bench-owner", trips, ownerAgent, signals.WithNextWait(time.Hour))
	sender := benchRuntimeHook(b, srv, "bench-sender", trips, func(context.Context, *signals.Run) error {
		b.Error("the sender ran a signal: the owner lost the thread")
		return nil
	})
	const thread = "forwarded"
	if acc, err := owner.Send(b.Context(), thread, signals.Signal{ID: "seed", Type: "msg"}); err != nil || acc.Action != signals.Woke {
		b.Fatalf("seed send: %+v, %v; want Woke", acc, err)
	}
	benchAwait(b, got, "seed")
	// Warm-up of the sender's connections.
	for i := range 3 {
		id := fmt.Sprint("warm", i)
		if _, err := sender.Send(b.Context(), thread, signals.Signal{ID: id, Type: "msg"}); err != nil {
			b.Fatal(err)
		}
		benchAwait(b, got, id)
	}

	lat := make([]time.Duration, 0, b.N)
	send := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	trips0 := trips.N()
	for i := range b.N {
		id := fmt.Sprint("f", i)
		start := time.Now()
		acc, err := sender.Send(b.Context(), thread, signals.Signal{ID: id, Type: "msg"})
		sent := time.Now()
		if err != nil {
			b.Fatal(err)
		}
		if acc.Action != signals.Forwarded {
			b.Fatalf("send %d: %+v, want Forwarded", i, acc)
		}
		at := benchAwait(b, got, id)
		lat = append(lat, at.Sub(start))
		send = append(send, sent.Sub(start))
	}
	b.StopTimer()
	benchReport(b, lat, send)
	b.ReportMetric(float64(trips.N()-trips0)/float64(b.N), "redis-rt/op")
}

// BenchmarkSignalsThroughput runs 3 runtimes in one process (3 Backends, each
// on its own client) over 1,000 threads: b.N signals, signal i to thread
// i%1000 sent from runtime i%3 by a pool of concurrent senders, and reports
// signals/s from the first Send until the agents completed every signal (an
// agent completes a signal when it has taken it, from Run.Signals or
// Run.Next; each signal is counted once). Sent→completed latency is reported
// overall (done-p50-ms, done-p99-ms), per Action of the Send (woke-*,
// fwd-*), and as the number of signals that took 100ms or more (slow-100ms);
// redis-rt/signal is the Redis round trips of all three clients from the
// first Send until the last signal completed, per signal; settled/s counts
// until every wake notice was acked too (the work that a signal leaves
// behind it), and the log has redis-server's commands and CPU per signal
// over that time.
func BenchmarkSignalsThroughput(b *testing.B) { benchSignalsThroughput(b, redisstreams.Options{}) }

// BenchmarkSignalsThroughputStreamIdleTTL is BenchmarkSignalsThroughput on
// backends built with redisstreams.Options.StreamIdleTTL (an hour: it never
// runs out here), for what the option costs per signal: every publish, and
// every inbox read that returns signals, sets the stream's expiry.
func BenchmarkSignalsThroughputStreamIdleTTL(b *testing.B) {
	benchSignalsThroughput(b, redisstreams.Options{StreamIdleTTL: time.Hour})
}

// benchSignalsThroughput is BenchmarkSignalsThroughput's body, on backends
// built with ro.
func benchSignalsThroughput(b *testing.B, ro redisstreams.Options) {
	const (
		threads  = 1000
		runtimes = 3
		senders  = 96 // concurrent Send calls, spread over the runtimes
	)
	srv := benchStart(b)
	var (
		mu       sync.Mutex
		seen     = make(map[string]bool, b.N)
		done     = make(chan struct{})
		finished time.Time
		dups     atomic.Int64
		warmed   = make(chan struct{}, runtimes)
		// Per signal i: when its Send started and when an agent took it
		// (Unix ns), and Send's Action.
		sentAt = make([]atomic.Int64, b.N)
		doneAt = make([]atomic.Int64, b.N)
		actOf  = make([]atomic.Int32, b.N)
	)
	take := func(id string) {
		if strings.HasPrefix(id, "warm-") {
			select {
			case warmed <- struct{}{}:
			default:
			}
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if seen[id] {
			dups.Add(1)
			return
		}
		seen[id] = true
		if i, err := strconv.Atoi(strings.TrimPrefix(id, "s")); err == nil && i >= 0 && i < b.N {
			doneAt[i].Store(time.Now().UnixNano())
		}
		if len(seen) == b.N {
			finished = time.Now()
			close(done)
		}
	}
	agent := func(ctx context.Context, run *signals.Run) error {
		for _, s := range run.Signals {
			take(s.ID)
		}
		for {
			s, ok := run.Next(ctx)
			if !ok {
				return nil
			}
			take(s.ID)
		}
	}
	// Tenures started from a wake notice rather than by a Send: a thread
	// whose signal no tenure was going to read (its sender was told
	// another tenure held the thread while that tenure was ending).
	var recovered atomic.Int64
	observe := func(e signals.Event) {
		if e.Kind == signals.Recovered {
			recovered.Add(1)
		}
	}
	trips := &redistest.RoundTrips{}
	rts := make([]*signals.Runtime, runtimes)
	for i := range rts {
		rts[i] = benchRuntimeWith(b, srv, fmt.Sprint("tp-", i), trips, ro, agent, signals.WithObserver(observe))
	}
	// Warm-up: every runtime's connections and the lease script, on threads
	// outside the measured set (their signals are not counted).
	for i, rt := range rts {
		if _, err := rt.Send(b.Context(), fmt.Sprint("tp-warm-", i), signals.Signal{ID: fmt.Sprint("warm-", i), Type: "msg"}); err != nil {
			b.Fatal(err)
		}
	}
	for range runtimes {
		select {
		case <-warmed:
		case <-time.After(30 * time.Second):
			b.Fatal("warm-up signals did not run within 30s")
		}
	}

	var (
		next    atomic.Int64
		actions [signals.Forwarded + 1]atomic.Int64
		wg      sync.WaitGroup
	)
	statc := srv.Client(b)
	scriptTimes := benchScriptTimes(b, statc)
	stats0, cpu0 := benchCmdStats(b, statc)
	procCPU0 := benchProcCPU()
	b.ResetTimer()
	trips0 := trips.N()
	dials0 := trips.Dials()
	start := time.Now()
	for range senders {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= b.N {
					return
				}
				id := fmt.Sprint("s", i)
				sentAt[i].Store(time.Now().UnixNano())
				acc, err := rts[i%runtimes].Send(b.Context(), fmt.Sprint("tp-", i%threads), signals.Signal{ID: id, Type: "msg"})
				if err != nil {
					b.Errorf("send %s: %v", id, err)
					take(id) // do not wait for it
					continue
				}
				if acc.Action >= signals.Woke && acc.Action <= signals.Forwarded {
					actions[acc.Action].Add(1)
					actOf[i].Store(int32(acc.Action))
				}
			}
		})
	}
	wg.Wait()
	sentAll := time.Since(start)
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		mu.Lock()
		n := len(seen)
		mu.Unlock()
		b.Fatalf("only %d of %d signals completed within 5m", n, b.N)
	}
	b.StopTimer()
	procCPU := benchProcCPU() - procCPU0
	tripsRun := trips.N() - trips0
	b.ReportMetric(float64(trips.Dials()-dials0), "dials")
	settled := benchSettled(b, statc)
	stats1, cpu1 := benchCmdStats(b, statc)
	benchLogCmdStats(b, stats0, stats1, cpu0, cpu1, b.N)
	scriptTimes(b.N)
	// CPU per signal, of this process (all 3 runtimes and the senders) and
	// of redis-server: less sensitive than signals/s to what else the
	// machine runs.
	b.ReportMetric(procCPU*1e6/float64(b.N), "go-cpu-µs/signal")
	b.ReportMetric((cpu1-cpu0)*1e6/float64(b.N), "redis-cpu-µs/signal")
	b.ReportMetric(float64(b.N)/settled.Sub(start).Seconds(), "settled/s")
	elapsed := finished.Sub(start)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "signals/s")
	b.ReportMetric(float64(b.N)/sentAll.Seconds(), "sends/s")
	for _, a := range []signals.Action{signals.Woke, signals.Delivered, signals.Forwarded} {
		b.ReportMetric(100*float64(actions[a].Load())/float64(b.N), a.String()+"-%")
	}
	// Sent→completed latency per signal, overall and per Action of its Send.
	all := make([]time.Duration, 0, b.N)
	per := map[signals.Action][]time.Duration{}
	for i := range b.N {
		d := time.Duration(doneAt[i].Load() - sentAt[i].Load())
		all = append(all, d)
		a := signals.Action(actOf[i].Load())
		per[a] = append(per[a], d)
	}
	slices.Sort(all)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(benchPercentile(all, 0.50)), "done-p50-ms")
	b.ReportMetric(ms(benchPercentile(all, 0.99)), "done-p99-ms")
	b.ReportMetric(float64(recovered.Load()), "recovered")
	b.ReportMetric(float64(len(all)-sort.Search(len(all), func(i int) bool { return all[i] >= 100*time.Millisecond })), "slow-100ms")
	b.ReportMetric(float64(tripsRun)/float64(b.N), "redis-rt/signal")
	for _, a := range []signals.Action{0, signals.Woke, signals.Delivered, signals.Forwarded} {
		ds := per[a]
		if len(ds) == 0 {
			continue
		}
		slices.Sort(ds)
		slow := func(d time.Duration) int {
			return len(ds) - sort.Search(len(ds), func(i int) bool { return ds[i] >= d })
		}
		b.Logf("%v: %d signals, sent→completed p50 %v p99 %v max %v, %d took ≥100ms, %d ≥500ms",
			a, len(ds), benchPercentile(ds, 0.5), benchPercentile(ds, 0.99), benchPercentile(ds, 1),
			slow(100*time.Millisecond), slow(500*time.Millisecond))
		if name := map[signals.Action]string{signals.Woke: "woke", signals.Forwarded: "fwd"}[a]; name != "" {
			b.ReportMetric(ms(benchPercentile(ds, 0.50)), name+"-p50-ms")
			b.ReportMetric(ms(benchPercentile(ds, 0.99)), name+"-p99-ms")
		}
	}
	if n := dups.Load(); n > 0 {
		b.Errorf("%d signals were given to an agent more than once", n)
	}
}

// BenchmarkEndingTenureForwarded measures Send→agent latency of a signal sent
// at the moment its thread's owner ends its tenure: runtime "owner" runs one
// signal on a fresh thread and its tenure, after the linger time, stops
// reading its inbox; a test hook holds it there, still holding the lease,
// while runtime "sender" sends to the thread (Forwarded to the ending
// tenure), and then lets it release. p50-µs/p99-µs are sender's Send start →
// an agent given the signal; the recovery interval is the default (1s).
func BenchmarkEndingTenureForwarded(b *testing.B) {
	srv := benchStart(b)
	got := make(chan benchArrival, 16)
	agent := func(ctx context.Context, run *signals.Run) error {
		now := time.Now()
		for _, s := range run.Signals {
			got <- benchArrival{s.ID, now}
		}
		for {
			s, ok := run.Next(ctx)
			if !ok {
				return nil
			}
			got <- benchArrival{s.ID, time.Now()}
		}
	}
	entered := make(chan string)
	proceed := make(chan struct{})
	var (
		stop atomic.Bool
		held sync.Map // threads whose first tenure end was held
	)
	hook := func(thread string) {
		if stop.Load() || !strings.HasPrefix(thread, "end-") {
			return
		}
		if _, again := held.LoadOrStore(thread, true); again {
			return // a later tenure (the one that ran the forwarded signal)
		}
		entered <- thread
		<-proceed
	}
	owner := benchRuntime(b, srv, "bench-owner", agent, signals.WithLinger(time.Millisecond),
		signals.WithHooks(signals.Hooks{BeforeRelease: hook}))
	sender := benchRuntime(b, srv, "bench-sender", agent)
	b.Cleanup(func() { stop.Store(true) }) // before the runtimes' Close

	lat := make([]time.Duration, 0, b.N)
	send := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		thread := fmt.Sprint("end-", i)
		first, id := fmt.Sprint("o", i), fmt.Sprint("f", i)
		if acc, err := owner.Send(b.Context(), thread, signals.Signal{ID: first, Type: "msg"}); err != nil || acc.Action != signals.Woke {
			b.Fatalf("owner send %d: %+v, %v; want Woke", i, acc, err)
		}
		benchAwait(b, got, first)
		select {
		case th := <-entered:
			if th != thread {
				b.Fatalf("tenure of %s ended, want %s", th, thread)
			}
		case <-time.After(30 * time.Second):
			b.Fatalf("the tenure of %s did not end within 30s", thread)
		}
		start := time.Now()
		acc, err := sender.Send(b.Context(), thread, signals.Signal{ID: id, Type: "msg"})
		sent := time.Now()
		proceed <- struct{}{}
		if err != nil {
			b.Fatal(err)
		}
		if acc.Action != signals.Forwarded {
			b.Fatalf("send %d: %+v, want Forwarded", i, acc)
		}
		at := benchAwait(b, got, id)
		lat = append(lat, at.Sub(start))
		send = append(send, sent.Sub(start))
	}
	b.StopTimer()
	benchReport(b, lat, send)
}
