//go:build !noleasebus && !nosignals

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/backoff"
	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

// signals measures how long a signal sent from a runtime that does not own
// the thread (Send returns Forwarded) takes to reach a run of the owner: Send
// start → the owner's RunStarted or SignalGiven event carrying the signal.
// Two runtimes, each on its own Backend and client, stand for two processes.
// The raw row is the PING round trip of one go-redis client, for scale.
func (r *runner) signals(ctx context.Context) {
	cfg := r.cfg
	note := fmt.Sprintf("%d signals sent one at a time from runtime B to a thread owned by runtime A (A lingers, so it keeps the lease); Send start → A's run receives the signal. raw go-redis: one PING round trip.", cfg.SignalSends)
	p50 := scenario{Name: "signals Forwarded p50", Unit: duration, Note: note}
	p99 := scenario{Name: "signals Forwarded p99", Unit: duration, Note: note}
	if !r.wants(p50.Name, p99.Name) {
		return
	}
	r.rounds(ctx, "signals Forwarded", []scenario{p50, p99}, []string{nameLeasebus, nameRaw}, func(ctx context.Context, c *redis.Client, name string) ([]sample, error) {
		var lats []float64
		var err error
		if name == nameRaw {
			lats, err = pingLatencies(ctx, c, cfg.SignalSends)
		} else {
			lats, err = forwardLatencies(ctx, r, cfg.SignalSends)
		}
		if err != nil {
			return nil, err
		}
		return []sample{{p50, quantile(lats, 0.5)}, {p99, quantile(lats, 0.99)}}, nil
	})
}

func pingLatencies(ctx context.Context, c *redis.Client, n int) ([]float64, error) {
	for range 50 { // warm-up
		if err := c.Ping(ctx).Err(); err != nil {
			return nil, err
		}
	}
	lats := make([]float64, 0, n)
	for range n {
		t0 := time.Now()
		if err := c.Ping(ctx).Err(); err != nil {
			return nil, err
		}
		lats = append(lats, float64(time.Since(t0)))
		_ = backoff.Sleep(ctx, 2*time.Millisecond)
	}
	return lats, nil
}

func forwardLatencies(ctx context.Context, r *runner, n int) ([]float64, error) {
	const thread = "bench-thread"
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))

	var mu sync.Mutex
	arrived := map[string]chan time.Time{}
	expect := func(id string) chan time.Time {
		ch := make(chan time.Time, 1)
		mu.Lock()
		arrived[id] = ch
		mu.Unlock()
		return ch
	}
	observe := func(e signals.Event) {
		if e.Kind != signals.RunStarted && e.Kind != signals.SignalGiven {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		for _, s := range e.Signals {
			if ch, ok := arrived[s.ID]; ok {
				ch <- e.Time
				delete(arrived, s.ID)
			}
		}
	}
	agent := func(context.Context, *signals.Run) error { return nil }

	newRuntime := func(id string, opts ...signals.Option) (*signals.Runtime, func(), error) {
		c := r.newClient()
		b, err := redisstreams.New(c, redisstreams.Options{Logger: quiet})
		if err != nil {
			c.Close()
			return nil, nil, err
		}
		opts = append(opts, signals.WithProcessID(id), signals.WithLogger(quiet))
		rt, err := signals.New(b, agent, opts...)
		if err != nil {
			b.Close()
			c.Close()
			return nil, nil, err
		}
		return rt, func() {
			cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = rt.Close(cctx)
			_ = b.Close()
			_ = c.Close()
		}, nil
	}
	owner, closeA, err := newRuntime("bench-A", signals.WithObserver(observe), signals.WithLinger(time.Hour))
	if err != nil {
		return nil, err
	}
	defer closeA()
	sender, closeB, err := newRuntime("bench-B")
	if err != nil {
		return nil, err
	}
	defer closeB()

	// A takes the thread.
	first := expect("first")
	acc, err := owner.Send(ctx, thread, signals.Signal{ID: "first", Type: "bench"})
	if err != nil {
		return nil, fmt.Errorf("owner send: %w", err)
	}
	if acc.Action != signals.Woke {
		return nil, fmt.Errorf("owner send: action %v, want woke", acc.Action)
	}
	if err := waitArrival(ctx, first); err != nil {
		return nil, err
	}

	const warm = 20
	lats := make([]float64, 0, n)
	for i := range warm + n {
		id := fmt.Sprintf("sig-%d", i)
		ch := expect(id)
		t0 := time.Now()
		acc, err := sender.Send(ctx, thread, signals.Signal{ID: id, Type: "bench"})
		if err != nil {
			return nil, fmt.Errorf("send %d: %w", i, err)
		}
		if acc.Action != signals.Forwarded {
			return nil, fmt.Errorf("send %d: action %v, want forwarded", i, acc.Action)
		}
		t1, err := waitArrivalAt(ctx, ch)
		if err != nil {
			return nil, fmt.Errorf("signal %d: %w", i, err)
		}
		if i >= warm {
			lats = append(lats, float64(t1.Sub(t0)))
		}
		_ = backoff.Sleep(ctx, 2*time.Millisecond)
	}
	return lats, nil
}

func waitArrival(ctx context.Context, ch chan time.Time) error {
	_, err := waitArrivalAt(ctx, ch)
	return err
}

func waitArrivalAt(ctx context.Context, ch chan time.Time) (time.Time, error) {
	select {
	case t := <-ch:
		return t, nil
	case <-time.After(10 * time.Second):
		return time.Time{}, errors.New("not received by the owner's run within 10s")
	case <-ctx.Done():
		return time.Time{}, ctx.Err()
	}
}
