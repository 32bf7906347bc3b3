//go:build !noleasebus

package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/pubsub"
	"github.com/leasebus/leasebus/redisstreams"
)

const leasebusMissing = ""

func leasebusPubSub() []pubsubContender {
	return []pubsubContender{{nameLeasebus, newLeasebusPubSub}}
}

func leasebusLocks() []lockContender {
	return []lockContender{{nameLeasebus, newLeasebusLock}}
}

// lbPubSub is redisstreams.Backend with its default Options.
type lbPubSub struct{ b *redisstreams.Backend }

func newLeasebusPubSub(c *redis.Client) (pubsubBackend, error) {
	b, err := redisstreams.New(c, redisstreams.Options{})
	if err != nil {
		return nil, err
	}
	return &lbPubSub{b: b}, nil
}

func (l *lbPubSub) Publish(ctx context.Context, topic string, payload []byte) error {
	return l.b.Publish(ctx, topic, pubsub.Event{Type: "bench", Data: payload})
}

func (l *lbPubSub) Subscribe(ctx context.Context, topic, group string, h func([]byte)) (func() error, error) {
	var opts []pubsub.SubscribeOption
	if group != "" {
		opts = append(opts, pubsub.Group(group))
	}
	sub, err := l.b.Subscribe(ctx, topic, func(_ context.Context, e pubsub.Event) error {
		h(e.Data)
		return nil
	}, opts...)
	if err != nil {
		return nil, err
	}
	return func() error { return sub.Unsubscribe(context.Background()) }, nil
}

func (l *lbPubSub) Close() error { return l.b.Close() }

// lbLock is redisstreams.Backend as a lease.Provider; renewal goes through
// its lease.BatchRenewer.
type lbLock struct {
	b  *redisstreams.Backend
	br lease.BatchRenewer
}

type lbHeld struct{ key, owner string }

func newLeasebusLock(c *redis.Client) (lockBackend, error) {
	b, err := redisstreams.New(c, redisstreams.Options{})
	if err != nil {
		return nil, err
	}
	return &lbLock{b: b, br: b}, nil
}

func (l *lbLock) Acquire(ctx context.Context, key, owner string, ttl time.Duration) (any, bool, error) {
	res, err := l.b.AcquireLease(ctx, key, owner, ttl)
	if err != nil || !res.Acquired {
		return nil, false, err
	}
	return lbHeld{key, owner}, true, nil
}

func (l *lbLock) Release(ctx context.Context, held any) error {
	h := held.(lbHeld)
	return l.b.ReleaseLease(ctx, h.key, h.owner)
}

func (l *lbLock) RenewAll(ctx context.Context, held []any, ttl time.Duration) (int, error) {
	reqs := make([]lease.Renewal, len(held))
	for i, x := range held {
		h := x.(lbHeld)
		reqs[i] = lease.Renewal{Key: h.key, Owner: h.owner, TTL: ttl}
	}
	ok, err := l.br.RenewLeases(ctx, reqs)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, v := range ok {
		if v {
			n++
		}
	}
	return n, nil
}

func (l *lbLock) Close() error { return l.b.Close() }

// nameLeasebusKeeper is the renewal row that goes through lease.Keeper, as
// an application holding many leases would.
const nameLeasebusKeeper = "leasebus Keeper"

// hasKeeper reports whether the Keeper renewal row can run in this build.
const hasKeeper = true

// renewRecorder is a lease.Provider that passes every call to a Backend and
// times the Keeper's batch renewals: a burst of RenewLeases calls with gaps
// under burstGap is one full renewal.
type renewRecorder struct {
	*redisstreams.Backend

	mu         sync.Mutex
	burstStart time.Time
	lastEnd    time.Time
	count      int
	full       int             // leases in a full renewal
	bursts     []time.Duration // durations of full renewals
	short      int             // bursts that renewed fewer than full (split cycles)
	failed     int
}

const burstGap = 100 * time.Millisecond

func (r *renewRecorder) RenewLeases(ctx context.Context, reqs []lease.Renewal) ([]bool, error) {
	start := time.Now()
	oks, err := r.Backend.RenewLeases(ctx, reqs)
	end := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.count > 0 && start.Sub(r.lastEnd) > burstGap {
		r.short++ // a previous burst never completed
		r.count = 0
	}
	if r.count == 0 {
		r.burstStart = start
	}
	r.lastEnd = end
	for _, ok := range oks {
		if !ok {
			r.failed++
		}
	}
	if err != nil {
		r.failed += len(reqs)
	}
	r.count += len(reqs)
	if r.count >= r.full {
		r.bursts = append(r.bursts, end.Sub(r.burstStart))
		r.count = 0
	}
	return oks, err
}

func (r *renewRecorder) snapshot() (bursts []time.Duration, failed int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.bursts), r.failed
}

// benchKeeperRenew keeps cfg.RenewLeases leases with one lease.Keeper that
// renews every cfg.KeeperEvery, skips the first full renewal and returns the
// mean duration of the next cfg.RenewReps full renewals (all leases, in the
// Keeper's batches of at most 1000).
func benchKeeperRenew(ctx context.Context, cfg config, c *redis.Client) (time.Duration, error) {
	b, err := redisstreams.New(c, redisstreams.Options{})
	if err != nil {
		return 0, err
	}
	defer b.Close()
	rec := &renewRecorder{Backend: b, full: cfg.RenewLeases}
	k := lease.NewKeeper(rec, lease.KeeperOptions{RenewEvery: cfg.KeeperEvery})
	defer k.Close()
	var next atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= cfg.RenewLeases || firstErr.Load() != nil {
					return
				}
				if _, err := k.Keep(ctx, fmt.Sprintf("bench:renew:%d", i), "renewer", cfg.LeaseTTL); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return 0, fmt.Errorf("setup: %w", err)
	}
	want := cfg.RenewReps + 1
	timeout := time.Duration(want+3) * cfg.KeeperEvery * 2
	if err := waitFor(ctx, timeout, fmt.Sprintf("%d full Keeper renewals", want), func() bool {
		bs, _ := rec.snapshot()
		return len(bs) >= want
	}); err != nil {
		return 0, err
	}
	bursts, failed := rec.snapshot()
	if failed > 0 {
		return 0, fmt.Errorf("%d renewals refused or failed", failed)
	}
	var sum time.Duration
	for _, d := range bursts[1:want] {
		sum += d
	}
	return sum / time.Duration(cfg.RenewReps), nil
}
