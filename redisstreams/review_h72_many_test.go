package redisstreams_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
	"github.com/leasebus/leasebus/redisstreams"
)

// TestReviewH72BlackHoledBackendAmongManySubscriptions: two NewURL
// Backends (go-redis's default pools) each hold one member of group "g"
// on each of 150 topics (AckDeadline 2s, Concurrency 2), and Backend B
// also 10 fan-out subscriptions; a third publishes one event per topic every
// 100ms for 10s. Backend A sits behind a proxy that black-holes it from
// 2.5s to 7.5s. pubsub's rules: every event runs (none lost); B, whose
// every handler returns nil, runs none twice; the Publishes all succeed;
// A, after the hole healed, starts no event that B had run (an event A
// started before the heal may run again on B: at-least-once for a
// consumer cut off); and every Unsubscribe returns within its 10s ctx.
func TestReviewH72BlackHoledBackendAmongManySubscriptions(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	proxy := redistest.NewProxy(t, srv.Addr())
	opts := redisstreams.Options{Prefix: "h72bhm"}
	a, err := redisstreams.NewURL(ctx, "redis://"+proxy.Addr(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	b, err := redisstreams.NewURL(ctx, srv.URL(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	pub, err := redisstreams.NewURL(ctx, srv.URL(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	const topics = 150
	type run struct {
		onA bool
		at  time.Time
	}
	var mu sync.Mutex
	runs := map[string][]run{}
	var healedAt time.Time
	handler := func(onA bool) pubsub.Handler {
		return func(_ context.Context, e pubsub.Event) error {
			mu.Lock()
			runs[e.ID] = append(runs[e.ID], run{onA, time.Now()})
			mu.Unlock()
			time.Sleep(30 * time.Millisecond)
			return nil
		}
	}
	var subsA, subsB []pubsub.Subscription
	for i := range topics {
		for _, onA := range []bool{true, false} {
			be := b
			if onA {
				be = a
			}
			s, err := be.Subscribe(ctx, fmt.Sprint("t", i), handler(onA), pubsub.Group("g"),
				pubsub.AckDeadline(2*time.Second), pubsub.Concurrency(2))
			if err != nil {
				t.Fatal(err)
			}
			if onA {
				subsA = append(subsA, s)
			} else {
				subsB = append(subsB, s)
			}
		}
	}
	for i := range 10 {
		s, err := b.Subscribe(ctx, fmt.Sprint("t", i), func(context.Context, pubsub.Event) error { return nil })
		if err != nil {
			t.Fatal(err)
		}
		subsB = append(subsB, s)
	}
	start := time.Now()
	var pubErr []string
	var ids []string
	hole, healed := false, false
	for r := 0; time.Since(start) < 10*time.Second; r++ {
		if !hole && time.Since(start) > 2500*time.Millisecond {
			proxy.BlackHole()
			hole = true
		}
		if !healed && time.Since(start) > 7500*time.Millisecond {
			mu.Lock()
			healedAt = time.Now()
			mu.Unlock()
			proxy.Restore()
			healed = true
		}
		for i := range topics {
			id := fmt.Sprint(r, "-", i)
			if err := pub.Publish(ctx, fmt.Sprint("t", i), pubsub.Event{ID: id, Type: "x"}); err != nil {
				pubErr = append(pubErr, fmt.Sprint(id, ": ", err))
				continue
			}
			ids = append(ids, id)
		}
		time.Sleep(100 * time.Millisecond)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		mu.Lock()
		k := len(runs)
		mu.Unlock()
		if k >= len(ids) || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	// A alone now: B's members go, and one more event per topic must
	// reach A's members (they read again after the hole).
	for _, s := range subsB[:topics] {
		if err := s.Unsubscribe(ctx); err != nil {
			t.Errorf("Unsubscribe of B's member: %v", err)
		}
	}
	subsB = subsB[topics:]
	lastAt := time.Now()
	var last []string
	for i := range topics {
		id := fmt.Sprint("last-", i)
		if err := b.Publish(ctx, fmt.Sprint("t", i), pubsub.Event{ID: id, Type: "x"}); err != nil {
			t.Fatal(err)
		}
		last = append(last, id)
	}
	var lastMissing []string
	for {
		mu.Lock()
		lastMissing = lastMissing[:0]
		for _, id := range last {
			if len(runs[id]) == 0 {
				lastMissing = append(lastMissing, id)
			}
		}
		mu.Unlock()
		if len(lastMissing) == 0 || time.Since(lastAt) > 10*time.Second {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("A alone: %d of %d events ran within %v", topics-len(lastMissing), topics, time.Since(lastAt).Round(time.Millisecond))
	if len(lastMissing) > 0 {
		t.Errorf("after the heal, with B's members gone, A's members did not run %d of %d new events within 10s: %v", len(lastMissing), topics, lastMissing[:min(len(lastMissing), 6)])
	}
	var wg sync.WaitGroup
	var umu sync.Mutex
	var unsubErr []string
	for _, s := range append(subsA, subsB...) {
		wg.Go(func() {
			uctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			t0 := time.Now()
			err := s.Unsubscribe(uctx)
			if d := time.Since(t0); err != nil || d > 10*time.Second+time.Second {
				umu.Lock()
				unsubErr = append(unsubErr, fmt.Sprintf("%s after %v: %v", s.Topic(), d.Round(time.Millisecond), err))
				umu.Unlock()
			}
		})
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	var lost, bTwice, aAfterHeal []string
	onA, dupAB := 0, 0
	for _, id := range ids {
		rs := runs[id]
		if len(rs) == 0 {
			lost = append(lost, id)
			continue
		}
		nb := 0
		for _, r := range rs {
			if r.onA {
				onA++
			} else {
				nb++
			}
		}
		if nb > 1 {
			bTwice = append(bTwice, id)
		}
		if nb > 0 && len(rs) > nb {
			dupAB++
			for _, r := range rs {
				if r.onA && r.at.After(healedAt) {
					aAfterHeal = append(aAfterHeal, id)
				}
			}
		}
	}
	t.Logf("%d events published, %d runs on A, %d ran on both; lost %d, twice on B %d, A after the heal of a B-run event %d; publish errors %d; unsubscribe problems %d",
		len(ids), onA, dupAB, len(lost), len(bTwice), len(aAfterHeal), len(pubErr), len(unsubErr))
	for name, l := range map[string][]string{"never ran": lost, "ran twice on B": bTwice, "run by A after the heal, and by B": aAfterHeal, "Publish failed": pubErr, "Unsubscribe": unsubErr} {
		if len(l) > 0 {
			t.Errorf("%s: %d: %v", name, len(l), l[:min(len(l), 6)])
		}
	}
}
