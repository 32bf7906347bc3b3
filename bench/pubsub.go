package main

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/backoff"
)

// streamMaxLen is the approximate stream cap every contender publishes with
// (leasebus's default), so trimming costs the same everywhere.
const streamMaxLen = 100_000

// pubsubBackend is what each pub/sub contender provides to the scenarios.
type pubsubBackend interface {
	// Publish stores payload on topic and returns once Redis stored it.
	Publish(ctx context.Context, topic string, payload []byte) error
	// Subscribe delivers the payloads of topic to h: alone (fan-out) when
	// group is "", else as one member of group. It returns an unsubscribe
	// func that waits for the subscription to stop.
	Subscribe(ctx context.Context, topic, group string, h func(payload []byte)) (func() error, error)
	// Close releases the contender's resources, never the client.
	Close() error
}

// pubsubContender builds a pubsubBackend on a fresh client.
type pubsubContender struct {
	Name string
	New  func(c *redis.Client) (pubsubBackend, error)
}

// newPayload returns a JSON string of size bytes whose first 16 characters
// after the quote carry seq in hex, so a handler can tell which publish it
// answers. Every contender publishes the same bytes.
func newPayload(size int, seq uint64) []byte {
	p := make([]byte, size)
	writeSeq(p, seq)
	for i := 18; i < size-1; i++ {
		p[i] = 'x'
	}
	p[0], p[size-1] = '"', '"'
	return p
}

func writeSeq(p []byte, seq uint64) {
	var b [8]byte
	for i := range 8 {
		b[i] = byte(seq >> (56 - 8*i))
	}
	hex.Encode(p[1:17], b[:])
	p[17] = '-'
}

func readSeq(p []byte) (uint64, bool) {
	if len(p) < 18 {
		return 0, false
	}
	var b [8]byte
	if _, err := hex.Decode(b[:], p[1:17]); err != nil {
		return 0, false
	}
	var seq uint64
	for i := range 8 {
		seq = seq<<8 | uint64(b[i])
	}
	return seq, true
}

// benchPublish measures publish throughput with workers goroutines and no
// subscriber.
func benchPublish(ctx context.Context, cfg config, b pubsubBackend, workers int) (float64, error) {
	bufs := make([][]byte, workers)
	for i := range bufs {
		bufs[i] = newPayload(cfg.PayloadSize, uint64(i))
	}
	return throughput(ctx, cfg, workers, func(ctx context.Context, w int) (bool, error) {
		return true, b.Publish(ctx, "bench.publish", bufs[w])
	})
}

// e2ePublishers is the number of goroutines that publish in the end-to-end
// scenarios.
const e2ePublishers = 16

// benchE2E measures publish→handler throughput: e2ePublishers goroutines
// publish cfg.E2EEvents events and the clock stops when the last one has been
// handled by one of subs subscriptions (a group when subs > 1).
func benchE2E(ctx context.Context, cfg config, b pubsubBackend, subs int) (float64, error) {
	const topic = "bench.e2e"
	group := ""
	if subs > 1 {
		group = "workers"
	}
	var handled atomic.Int64
	var unsubs []func() error
	defer func() {
		for _, u := range unsubs {
			_ = u()
		}
	}()
	for range subs {
		u, err := b.Subscribe(ctx, topic, group, func([]byte) { handled.Add(1) })
		if err != nil {
			return 0, fmt.Errorf("subscribe: %w", err)
		}
		unsubs = append(unsubs, u)
	}
	payload := newPayload(cfg.PayloadSize, 0)
	// Warm up until the subscriptions demonstrably receive (a fan-out
	// reader may start after Subscribe returned), then let it settle.
	for handled.Load() < int64(cfg.E2EWarmup) {
		if err := b.Publish(ctx, topic, payload); err != nil {
			return 0, fmt.Errorf("warm-up publish: %w", err)
		}
	}
	if err := settle(ctx, &handled, 100*time.Millisecond, 30*time.Second); err != nil {
		return 0, err
	}
	base := handled.Load()
	target := base + int64(cfg.E2EEvents)
	var next atomic.Int64
	start := time.Now()
	errc := make(chan error, e2ePublishers)
	var wg sync.WaitGroup
	for range e2ePublishers {
		wg.Go(func() {
			p := slices.Clone(payload)
			for next.Add(1) <= int64(cfg.E2EEvents) {
				if err := b.Publish(ctx, topic, p); err != nil {
					errc <- fmt.Errorf("publish: %w", err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	if err := <-errc; err != nil {
		return 0, err
	}
	if err := waitFor(ctx, 60*time.Second, fmt.Sprintf("%d deliveries", cfg.E2EEvents), func() bool { return handled.Load() >= target }); err != nil {
		return 0, fmt.Errorf("%w (got %d)", err, handled.Load()-base)
	}
	elapsed := time.Since(start)
	return float64(cfg.E2EEvents) / elapsed.Seconds(), nil
}

// benchLatency publishes cfg.LatencyRate events/s from one goroutine paced by
// a ticker for cfg.LatencyDur to one fan-out subscription and returns the
// p50 and p99 of publish start → handler entry.
func benchLatency(ctx context.Context, cfg config, b pubsubBackend) (p50, p99 time.Duration, err error) {
	const topic = "bench.latency"
	n := int(cfg.LatencyDur.Seconds() * float64(cfg.LatencyRate))
	starts := make([]atomic.Int64, n)
	lats := make([]atomic.Int64, n)
	var handled, warm atomic.Int64
	origin := time.Now()
	unsub, err := b.Subscribe(ctx, topic, "", func(p []byte) {
		now := time.Since(origin)
		seq, ok := readSeq(p)
		if !ok || seq == 0 {
			warm.Add(1)
			return
		}
		i := int(seq - 1)
		if i < n && lats[i].Load() == 0 {
			lats[i].Store(int64(now) - starts[i].Load())
			handled.Add(1)
		}
	})
	if err != nil {
		return 0, 0, fmt.Errorf("subscribe: %w", err)
	}
	defer func() { _ = unsub() }()
	payload := newPayload(cfg.PayloadSize, 0)
	for warm.Load() < 50 {
		if err := b.Publish(ctx, topic, payload); err != nil {
			return 0, 0, fmt.Errorf("warm-up publish: %w", err)
		}
		_ = backoff.Sleep(ctx, time.Millisecond)
	}
	if err := settle(ctx, &warm, 100*time.Millisecond, 30*time.Second); err != nil {
		return 0, 0, err
	}
	tick := time.NewTicker(time.Second / time.Duration(cfg.LatencyRate))
	defer tick.Stop()
	for i := range n {
		select {
		case <-tick.C:
		case <-ctx.Done():
			return 0, 0, ctx.Err()
		}
		writeSeq(payload, uint64(i+1))
		starts[i].Store(int64(time.Since(origin)))
		if err := b.Publish(ctx, topic, payload); err != nil {
			return 0, 0, fmt.Errorf("publish: %w", err)
		}
	}
	if err := waitFor(ctx, 30*time.Second, fmt.Sprintf("%d deliveries", n), func() bool { return handled.Load() >= int64(n) }); err != nil {
		return 0, 0, fmt.Errorf("%w (got %d)", err, handled.Load())
	}
	all := make([]float64, n)
	for i := range lats {
		all[i] = float64(lats[i].Load())
	}
	return time.Duration(quantile(all, 0.5)), time.Duration(quantile(all, 0.99)), nil
}

// errNotReady is returned by a contender whose API has not landed.
var errNotReady = errors.New("not available in this build")
