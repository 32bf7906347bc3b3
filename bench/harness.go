package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasebus/leasebus/internal/backoff"
)

// config holds the sizes of one run; --quick selects the smaller one.
type config struct {
	Rounds      int           // samples per scenario and contender
	Warmup      time.Duration // run before a throughput window, not counted
	Window      time.Duration // throughput measurement window
	E2EEvents   int           // events per end-to-end sample
	E2EWarmup   int           // events handled before an end-to-end sample
	LatencyRate int           // events/s of the latency scenario
	LatencyDur  time.Duration // length of one latency sample
	RenewLeases int           // leases held in the renewal scenario
	RenewReps   int           // timed full renewals per sample (the sample is their mean)
	KeeperEvery time.Duration // RenewEvery of the lease.Keeper renewal row
	SignalSends int           // forwarded signals per signals sample
	PayloadSize int           // bytes of every event payload
	PoolSize    int           // go-redis pool size of every contender
	LeaseTTL    time.Duration // ttl of every lease
	HotKey1     bool          // run the 1-goroutine hot-key scenario
}

var fullConfig = config{
	Rounds:      5,
	Warmup:      300 * time.Millisecond,
	Window:      2 * time.Second,
	E2EEvents:   20_000,
	E2EWarmup:   500,
	LatencyRate: 1000,
	LatencyDur:  3 * time.Second,
	RenewLeases: 10_000,
	RenewReps:   3,
	KeeperEvery: 2 * time.Second,
	SignalSends: 300,
	PayloadSize: 256,
	PoolSize:    64,
	LeaseTTL:    30 * time.Second,
	HotKey1:     true,
}

var quickConfig = config{
	Rounds:      2,
	Warmup:      100 * time.Millisecond,
	Window:      300 * time.Millisecond,
	E2EEvents:   2_000,
	E2EWarmup:   200,
	LatencyRate: 1000,
	LatencyDur:  time.Second,
	RenewLeases: 2_000,
	RenewReps:   1,
	KeeperEvery: 500 * time.Millisecond,
	SignalSends: 50,
	PayloadSize: 256,
	PoolSize:    64,
	LeaseTTL:    30 * time.Second,
	HotKey1:     false,
}

// throughput runs op in workers goroutines, discards what completes during
// cfg.Warmup, and returns the rate of counted ops (op returned true) in the
// following cfg.Window. The first error of any worker stops the run.
func throughput(ctx context.Context, cfg config, workers int, op func(ctx context.Context, worker int) (bool, error)) (float64, error) {
	var (
		count   atomic.Int64
		stop    atomic.Bool
		errOnce sync.Once
		firstEr error
		wg      sync.WaitGroup
	)
	for w := range workers {
		wg.Go(func() {
			for !stop.Load() {
				ok, err := op(ctx, w)
				if err != nil {
					errOnce.Do(func() { firstEr = fmt.Errorf("worker %d: %w", w, err) })
					stop.Store(true)
					return
				}
				if ok {
					count.Add(1)
				}
			}
		})
	}
	finish := func() error { stop.Store(true); wg.Wait(); return firstEr }
	if err := backoff.Sleep(ctx, cfg.Warmup); err != nil {
		return 0, errors.Join(err, finish())
	}
	c0, t0 := count.Load(), time.Now()
	if err := backoff.Sleep(ctx, cfg.Window); err != nil {
		return 0, errors.Join(err, finish())
	}
	c1, t1 := count.Load(), time.Now()
	if err := finish(); err != nil {
		return 0, err
	}
	return float64(c1-c0) / t1.Sub(t0).Seconds(), nil
}

// waitFor polls cond every millisecond until it holds, ctx ends or timeout
// passes.
func waitFor(ctx context.Context, timeout time.Duration, what string, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %v waiting for %s", timeout, what)
		}
		if err := backoff.Sleep(ctx, time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}

// settle waits until n stops changing for quiet, at most timeout.
func settle(ctx context.Context, n *atomic.Int64, quiet, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	last, since := n.Load(), time.Now()
	for time.Since(since) < quiet {
		if time.Now().After(deadline) {
			return fmt.Errorf("deliveries did not settle within %v", timeout)
		}
		if err := backoff.Sleep(ctx, 5*time.Millisecond); err != nil {
			return err
		}
		if cur := n.Load(); cur != last {
			last, since = cur, time.Now()
		}
	}
	return nil
}
