// Command bench compares leasebus with peer libraries and a hand-written
// go-redis baseline on one Redis, and prints a markdown table.
//
//	go run .                 # full run on a private redis-server
//	go run . --quick         # reduced set, under a minute
//	go run . --redis URL     # use an existing (throwaway!) Redis: it is FLUSHALLed
//	go run . --out FILE      # also write the table to FILE
//
// Contenders run alternately (A B A B …) for several rounds with FLUSHALL in
// between; every contender gets a fresh client with the same pool size, the
// same payload and the same warm-up. The figures are reported, never
// asserted: the exit status is non-zero only on real errors.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

func main() {
	os.Exit(run())
}

func run() int {
	quick := flag.Bool("quick", false, "run a reduced set in under a minute")
	redisURL := flag.String("redis", "", "Redis URL to use instead of a private redis-server (it is FLUSHALLed between runs)")
	out := flag.String("out", "", "also write the table to this file")
	only := flag.String("only", "", "run only scenarios whose name contains this (for development)")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the run to this file (for development)")
	flag.Parse()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench: %v\n", err)
			return 2
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintf(os.Stderr, "bench: %v\n", err)
			return 2
		}
		defer pprof.StopCPUProfile()
	}

	cfg := fullConfig
	if *quick {
		cfg = quickConfig
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var srv *redisServer
	opts := &redis.Options{}
	if *redisURL != "" {
		o, err := redis.ParseURL(*redisURL)
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench: --redis %q: %v\n", *redisURL, err)
			return 2
		}
		opts = o
	} else {
		s, err := startRedis(ctx)
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench: %v\n", err)
			return 1
		}
		srv = s
		defer srv.stop()
		opts.Addr = s.addr
	}

	// Ctrl-C or SIGTERM: kill the private server and leave.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		sig := <-sigs
		fmt.Fprintf(os.Stderr, "\nbench: %v: stopping\n", sig)
		cancel()
		srv.stop()
		os.Exit(130)
	}()

	r := &runner{cfg: cfg, opts: *opts, only: *only, log: os.Stderr}
	env, err := r.environment(ctx, *quick)
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		return 1
	}
	fmt.Fprint(os.Stderr, env)
	r.runAll(ctx)

	var b strings.Builder
	b.WriteString(env)
	b.WriteString("\n")
	renderTable(&b, r.results)
	for _, n := range r.notes {
		fmt.Fprintf(&b, "- note: %s\n", n)
	}
	fmt.Print("\n" + b.String())
	if *out != "" {
		if err := os.WriteFile(*out, []byte(b.String()), 0o644); err != nil {
			fmt.Fprintf(os.Stderr, "bench: write %s: %v\n", *out, err)
			return 1
		}
	}
	if len(r.errs) > 0 {
		fmt.Fprintf(os.Stderr, "\nbench: %d error(s):\n", len(r.errs))
		for _, e := range r.errs {
			fmt.Fprintf(os.Stderr, "  %v\n", e)
		}
		return 1
	}
	return 0
}

// runner runs the scenarios and collects results, notes and errors.
type runner struct {
	cfg     config
	opts    redis.Options
	only    string
	log     io.Writer
	results []*result
	notes   []string
	errs    []error
}

func (r *runner) environment(ctx context.Context, quick bool) (string, error) {
	c := r.newClient()
	defer c.Close()
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return "", fmt.Errorf("redis at %s: %w", r.opts.Addr, err)
	}
	version := "?"
	for line := range strings.SplitSeq(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "redis_version:"); ok {
			version = v
		}
	}
	mode := "full"
	if quick {
		mode = "quick"
	}
	return fmt.Sprintf("mode %s · %d rounds · %d CPUs (GOMAXPROCS %d) · %s · Redis %s at %s · pool %d · payload %d B\n",
		mode, r.cfg.Rounds, runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version(), version, r.opts.Addr,
		r.cfg.PoolSize, r.cfg.PayloadSize), nil
}

func (r *runner) newClient() *redis.Client {
	o := r.opts
	o.PoolSize = r.cfg.PoolSize
	o.MinIdleConns = 0
	return redis.NewClient(&o)
}

func (r *runner) result(s scenario, contender string) *result {
	for _, x := range r.results {
		if x.Scenario.Name == s.Name && x.Contender == contender {
			return x
		}
	}
	x := &result{Scenario: s, Contender: contender}
	r.results = append(r.results, x)
	return x
}

func (r *runner) wants(names ...string) bool {
	if r.only == "" {
		return true
	}
	for _, n := range names {
		if strings.Contains(n, r.only) {
			return true
		}
	}
	return false
}

// sample is one measurement of one scenario.
type sample struct {
	s scenario
	v float64
}

// rounds runs body for every contender in turn, cfg.Rounds times, rotating
// the starting contender each round, with FLUSHALL and a fresh client before
// each run. body returns one sample per scenario it measures.
func (r *runner) rounds(ctx context.Context, title string, scenarios []scenario, contenders []string, body func(ctx context.Context, c *redis.Client, contender string) ([]sample, error)) {
	for _, s := range scenarios {
		for _, name := range contenders {
			r.result(s, name) // fix row order
		}
	}
	failed := map[string]bool{}
	for round := range r.cfg.Rounds {
		for i := range contenders {
			name := contenders[(i+round)%len(contenders)]
			if failed[name] || ctx.Err() != nil {
				continue
			}
			t0 := time.Now()
			samples, err := r.once(ctx, func(ctx context.Context, c *redis.Client) ([]sample, error) { return body(ctx, c, name) })
			if err != nil {
				failed[name] = true
				r.errs = append(r.errs, fmt.Errorf("%s / %s: %w", title, name, err))
				fmt.Fprintf(r.log, "  %-28s %-22s round %d: ERROR %v\n", title, name, round+1, err)
				continue
			}
			var parts []string
			for _, sm := range samples {
				r.result(sm.s, name).Samples = append(r.result(sm.s, name).Samples, sm.v)
				parts = append(parts, format(sm.s.Unit, sm.v))
			}
			fmt.Fprintf(r.log, "  %-28s %-22s round %d: %s (%.1fs)\n", title, name, round+1, strings.Join(parts, " / "), time.Since(t0).Seconds())
		}
	}
}

func (r *runner) once(ctx context.Context, f func(ctx context.Context, c *redis.Client) ([]sample, error)) ([]sample, error) {
	c := r.newClient()
	defer c.Close()
	if err := c.FlushAll(ctx).Err(); err != nil {
		return nil, fmt.Errorf("flushall: %w", err)
	}
	return f(ctx, c)
}

func (r *runner) runAll(ctx context.Context) {
	cfg := r.cfg
	psContenders := append([]pubsubContender{
		{nameWatermill, newWatermill},
		{nameRaw, newRawPubSub},
	}, leasebusPubSub()...)
	lockContenders := append([]lockContender{
		{nameRedislock, newRedislock},
		{nameRedsync, newRedsync},
		{nameRaw, newRawLock},
	}, leasebusLocks()...)
	if len(psContenders) < 3 || len(lockContenders) < 4 {
		r.notes = append(r.notes, "leasebus contenders left out: "+leasebusMissing)
	}
	psNew := map[string]func(*redis.Client) (pubsubBackend, error){}
	var psNames []string
	for _, c := range psContenders {
		psNew[c.Name] = c.New
		psNames = append(psNames, c.Name)
	}
	lockNew := map[string]func(*redis.Client) (lockBackend, error){}
	var lockNames []string
	for _, c := range lockContenders {
		lockNew[c.Name] = c.New
		lockNames = append(lockNames, c.Name)
	}
	psRun := func(f func(ctx context.Context, b pubsubBackend) ([]sample, error)) func(context.Context, *redis.Client, string) ([]sample, error) {
		return func(ctx context.Context, c *redis.Client, name string) ([]sample, error) {
			b, err := psNew[name](c)
			if err != nil {
				return nil, err
			}
			s, err := f(ctx, b)
			return s, errors.Join(err, b.Close())
		}
	}
	lockRun := func(f func(ctx context.Context, b lockBackend) ([]sample, error)) func(context.Context, *redis.Client, string) ([]sample, error) {
		return func(ctx context.Context, c *redis.Client, name string) ([]sample, error) {
			b, err := lockNew[name](c)
			if err != nil {
				return nil, err
			}
			s, err := f(ctx, b)
			if cl, ok := b.(io.Closer); ok {
				err = errors.Join(err, cl.Close())
			}
			return s, err
		}
	}

	for _, workers := range []int{1, 16} {
		s := scenario{Name: fmt.Sprintf("publish, %d goroutine%s", workers, plural(workers)), Unit: opsPerSec,
			Note: fmt.Sprintf("Publish calls/s of a %d-byte event, no subscriber, %v window after %v warm-up.", cfg.PayloadSize, cfg.Window, cfg.Warmup)}
		if !r.wants(s.Name) {
			continue
		}
		r.rounds(ctx, s.Name, []scenario{s}, psNames, psRun(func(ctx context.Context, b pubsubBackend) ([]sample, error) {
			v, err := benchPublish(ctx, cfg, b, workers)
			return []sample{{s, v}}, err
		}))
	}
	for _, subs := range []int{1, 4} {
		name := "end-to-end, 1 subscriber"
		if subs > 1 {
			name = fmt.Sprintf("end-to-end, group of %d", subs)
		}
		s := scenario{Name: name, Unit: opsPerSec,
			Note: fmt.Sprintf("%d events published by %d goroutines; events/s from the first publish to the last handler call (after %d warm-up events).", cfg.E2EEvents, e2ePublishers, cfg.E2EWarmup)}
		if !r.wants(s.Name) {
			continue
		}
		r.rounds(ctx, s.Name, []scenario{s}, psNames, psRun(func(ctx context.Context, b pubsubBackend) ([]sample, error) {
			v, err := benchE2E(ctx, cfg, b, subs)
			return []sample{{s, v}}, err
		}))
	}
	{
		note := fmt.Sprintf("one publisher paced by a ticker at %d events/s for %v, one subscriber; publish start → handler entry.", cfg.LatencyRate, cfg.LatencyDur)
		p50 := scenario{Name: fmt.Sprintf("latency p50 @ %d/s", cfg.LatencyRate), Unit: duration, Note: note}
		p99 := scenario{Name: fmt.Sprintf("latency p99 @ %d/s", cfg.LatencyRate), Unit: duration, Note: note}
		if r.wants(p50.Name, p99.Name) {
			r.rounds(ctx, "latency", []scenario{p50, p99}, psNames, psRun(func(ctx context.Context, b pubsubBackend) ([]sample, error) {
				a, z, err := benchLatency(ctx, cfg, b)
				return []sample{{p50, float64(a)}, {p99, float64(z)}}, err
			}))
		}
	}
	type lockCase struct {
		workers int
		hot     bool
	}
	cases := []lockCase{{1, false}, {16, false}, {16, true}}
	if cfg.HotKey1 {
		cases = []lockCase{{1, false}, {16, false}, {1, true}, {16, true}}
	}
	for _, lc := range cases {
		where, note := "distinct keys", "acquire+release cycles/s, each goroutine on its own key"
		if lc.hot {
			where, note = "one hot key", "successful acquire+release cycles/s, every goroutine on one key, a lost acquire retried at once"
		}
		s := scenario{Name: fmt.Sprintf("lease cycle, %d goroutine%s, %s", lc.workers, plural(lc.workers), where), Unit: opsPerSec,
			Note: fmt.Sprintf("%s; %v window after %v warm-up.", note, cfg.Window, cfg.Warmup)}
		if !r.wants(s.Name) {
			continue
		}
		r.rounds(ctx, s.Name, []scenario{s}, lockNames, lockRun(func(ctx context.Context, b lockBackend) ([]sample, error) {
			v, err := benchLockCycle(ctx, cfg, b, lc.workers, lc.hot)
			return []sample{{s, v}}, err
		}))
	}
	{
		s := scenario{Name: fmt.Sprintf("renew %s held leases", groupDigits(int64(cfg.RenewLeases))), Unit: duration,
			Note: fmt.Sprintf("time for one renewal of all %s leases (mean of %d after one warm-up renewal): leasebus RenewLeases with all leases in one call; leasebus Keeper: a lease.Keeper (RenewEvery %v) renewing them in its batches of 1000, up to 4 at once, timed from its first to its last RenewLeases call; redislock Refresh and redsync Extend one call at a time; raw: one go-redis pipeline of compare-and-PEXPIRE EVALSHA.", groupDigits(int64(cfg.RenewLeases)), cfg.RenewReps, cfg.KeeperEvery)}
		if r.wants(s.Name) {
			names := lockNames
			if hasKeeper {
				names = append(slices.Clone(names), nameLeasebusKeeper)
			}
			renew := lockRun(func(ctx context.Context, b lockBackend) ([]sample, error) {
				v, err := benchRenew(ctx, cfg, b)
				return []sample{{s, float64(v)}}, err
			})
			r.rounds(ctx, s.Name, []scenario{s}, names, func(ctx context.Context, c *redis.Client, name string) ([]sample, error) {
				if name == nameLeasebusKeeper {
					v, err := benchKeeperRenew(ctx, cfg, c)
					return []sample{{s, float64(v)}}, err
				}
				return renew(ctx, c, name)
			})
		}
	}
	r.signals(ctx)
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
