package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// lockBackend is what each lease/lock contender provides to the scenarios.
type lockBackend interface {
	// Acquire tries once to take key for owner; ok false when another owner
	// holds it. held is passed back to Release and RenewAll.
	Acquire(ctx context.Context, key, owner string, ttl time.Duration) (held any, ok bool, err error)
	// Release gives up a lease Acquire returned.
	Release(ctx context.Context, held any) error
	// RenewAll extends every lease in held to ttl from now, the contender's
	// way, and returns how many it renewed.
	RenewAll(ctx context.Context, held []any, ttl time.Duration) (int, error)
}

// lockContender builds a lockBackend on a fresh client.
type lockContender struct {
	Name string
	New  func(c *redis.Client) (lockBackend, error)
}

// benchLockCycle measures acquire+release cycles/s with workers goroutines,
// each on its own key, or all on one key when hot; with hot, only successful
// cycles count and a failed acquire is retried at once.
func benchLockCycle(ctx context.Context, cfg config, b lockBackend, workers int, hot bool) (float64, error) {
	keys := make([]string, workers)
	owners := make([]string, workers)
	for i := range workers {
		keys[i] = fmt.Sprintf("bench:lock:%d", i)
		if hot {
			keys[i] = "bench:lock:hot"
		}
		owners[i] = fmt.Sprintf("worker-%d", i)
	}
	return throughput(ctx, cfg, workers, func(ctx context.Context, w int) (bool, error) {
		h, ok, err := b.Acquire(ctx, keys[w], owners[w], cfg.LeaseTTL)
		if err != nil || !ok {
			return false, err
		}
		return true, b.Release(ctx, h)
	})
}

// benchRenew acquires cfg.RenewLeases leases (16 goroutines, not timed),
// renews them all once to warm up, then times cfg.RenewReps full renewals and
// returns their mean duration.
func benchRenew(ctx context.Context, cfg config, b lockBackend) (time.Duration, error) {
	n := cfg.RenewLeases
	held := make([]any, n)
	var next atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n || firstErr.Load() != nil {
					return
				}
				h, ok, err := b.Acquire(ctx, fmt.Sprintf("bench:renew:%d", i), "renewer", cfg.LeaseTTL)
				if err == nil && !ok {
					err = fmt.Errorf("lease %d not acquired", i)
				}
				if err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				held[i] = h
			}
		})
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return 0, fmt.Errorf("setup: %w", err)
	}
	renew := func() error {
		got, err := b.RenewAll(ctx, held, cfg.LeaseTTL)
		if err != nil {
			return err
		}
		if got != n {
			return fmt.Errorf("renewed %d of %d leases", got, n)
		}
		return nil
	}
	if err := renew(); err != nil {
		return 0, fmt.Errorf("warm-up renewal: %w", err)
	}
	start := time.Now()
	for range cfg.RenewReps {
		if err := renew(); err != nil {
			return 0, err
		}
	}
	return time.Since(start) / time.Duration(cfg.RenewReps), nil
}
