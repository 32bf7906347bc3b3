package redisstreams

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// TestReviewH78SlowLinkGroups: pubsub groups over a link with a 5ms round
// trip (redistest.SlowLink; a Redis on another host), two Backends on
// NewURL clients with go-redis's defaults, 30 topics, each with a group
// member on both (Concurrency 4, AckDeadline 1s, MaxDeliveries 3,
// RedeliveryDelay 50ms) and a dead-letter subscription, 100 events per
// topic published from both at once: 10 nacked on their first attempt, 2
// whose first handler on A runs past the ack deadline (1.5s), 1 that
// always fails. It asserts that every event is acked; that the plain ones
// run once; the nacked ones exactly twice, the second as attempt 2; each
// failing one exactly 3 times and then reaches its dead-letter topic once;
// each slow one is run again elsewhere only after its ack deadline; Flush
// returns on both (within 5s); and that Unsubscribe and Close each return
// within 2s.
func TestReviewH78SlowLinkGroups(t *testing.T) {
	if testing.Short() {
		t.Skip("a slow-link load test: skipped under -short")
	}
	const (
		topics   = 30
		perTopic = 100
		ackDL    = time.Second
	)
	srv := redistest.Start(t, redistest.Options{})
	link := redistest.NewSlowLink(t, srv.Addr(), 2500*time.Microsecond)
	ctx := context.Background()
	mk := func() *Backend {
		b, err := NewURL(ctx, link.URL(), Options{Prefix: "h78g"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		return b
	}
	bes := []*Backend{mk(), mk()}

	type run struct {
		be      int
		attempt int
		start   time.Time
		ok      bool
	}
	var mu sync.Mutex
	runs := map[string][]run{}
	dead := map[string]int{}
	handler := func(be int) pubsub.Handler {
		return func(hctx context.Context, e pubsub.Event) error {
			mu.Lock()
			runs[e.ID] = append(runs[e.ID], run{be: be, attempt: e.DeliveryAttempt, start: time.Now()})
			i := len(runs[e.ID]) - 1
			mu.Unlock()
			var err error
			switch {
			case e.Type == "poison":
				err = errors.New("always fails")
			case e.Type == "nack1" && e.DeliveryAttempt == 1:
				err = errors.New("fails once")
			case e.Type == "slow" && be == 0 && e.DeliveryAttempt == 1:
				select {
				case <-time.After(ackDL * 3 / 2):
				case <-hctx.Done():
				}
			}
			mu.Lock()
			runs[e.ID][i].ok = err == nil
			mu.Unlock()
			return err
		}
	}
	var subs []pubsub.Subscription
	for i := range topics {
		topic := fmt.Sprintf("t%d", i)
		for be, b := range bes {
			s, err := b.Subscribe(ctx, topic, handler(be), pubsub.Group("g"), pubsub.Concurrency(4),
				pubsub.AckDeadline(ackDL), pubsub.MaxDeliveries(3), pubsub.RedeliveryDelay(50*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			subs = append(subs, s)
		}
		s, err := bes[1].Subscribe(ctx, pubsub.DeadLetterTopic(topic), func(_ context.Context, e pubsub.Event) error {
			mu.Lock()
			dead[e.ID]++
			mu.Unlock()
			return nil
		}, pubsub.Group("dl"))
		if err != nil {
			t.Fatal(err)
		}
		subs = append(subs, s)
	}

	kind := map[string]string{}
	var wg sync.WaitGroup
	var pubErr error
	var pmu sync.Mutex
	for i := range topics {
		for j := range perTopic {
			typ := "plain"
			switch {
			case j == 0:
				typ = "poison"
			case j%10 == 1:
				typ = "nack1"
			case j == 50 || j == 77:
				typ = "slow"
			}
			kind[fmt.Sprintf("e%d-%d", i, j)] = typ
		}
	}
	start := time.Now()
	for be, b := range bes {
		for w := range 4 {
			wg.Go(func() {
				for i := range topics {
					for j := be*4 + w; j < perTopic; j += 8 {
						id := fmt.Sprintf("e%d-%d", i, j)
						if err := b.Publish(ctx, fmt.Sprintf("t%d", i), pubsub.Event{ID: id, Type: kind[id]}); err != nil {
							pmu.Lock()
							pubErr = err
							pmu.Unlock()
						}
					}
				}
			})
		}
	}
	wg.Wait()
	if pubErr != nil {
		t.Fatal(pubErr)
	}
	published := time.Since(start)

	done := func() bool {
		mu.Lock()
		defer mu.Unlock()
		for id, typ := range kind {
			if typ == "poison" {
				if dead[id] == 0 {
					return false
				}
				continue
			}
			acked := false
			for _, r := range runs[id] {
				acked = acked || r.ok
			}
			if !acked {
				return false
			}
		}
		return true
	}
	deadline := time.Now().Add(30 * time.Second)
	for !done() && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	allDone := time.Since(start)
	for i, b := range bes {
		f0 := time.Now()
		fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := b.Flush(fctx)
		cancel()
		if d := time.Since(f0); err != nil || d > 5*time.Second {
			t.Errorf("Backend %d's Flush: %v after %v", i, err, d.Round(time.Millisecond))
		}
	}
	time.Sleep(500 * time.Millisecond) // any late duplicate

	mu.Lock()
	bad := 0
	fail := func(format string, args ...any) {
		bad++
		if bad <= 20 {
			t.Errorf(format, args...)
		}
	}
	for id, typ := range kind {
		rs := runs[id]
		switch typ {
		case "plain":
			if len(rs) != 1 || !rs[0].ok {
				fail("%s (plain): %d runs %+v, want 1, acked", id, len(rs), rs)
			}
		case "nack1":
			if len(rs) != 2 || rs[0].ok || !rs[1].ok || rs[1].attempt != 2 {
				fail("%s (nacked once): runs %+v, want a failed attempt 1 and an acked attempt 2", id, rs)
			}
		case "poison":
			if len(rs) != 3 || dead[id] != 1 {
				fail("%s (always fails): %d runs, %d dead letters; want 3 runs, 1 dead letter", id, len(rs), dead[id])
			}
		case "slow":
			acked := false
			for _, r := range rs {
				acked = acked || r.ok
			}
			if !acked {
				fail("%s (slow): never acked: %+v", id, rs)
			}
			if len(rs) > 1 && rs[0].be == 0 && rs[1].start.Sub(rs[0].start) < ackDL {
				fail("%s (slow): run again %v after its first run on A, before the ack deadline %v", id, rs[1].start.Sub(rs[0].start), ackDL)
			}
		}
	}
	nRuns := 0
	for _, rs := range runs {
		nRuns += len(rs)
	}
	mu.Unlock()
	if !done() {
		t.Errorf("not every event acked or dead-lettered 30s after the publishes began")
	}

	var slowest time.Duration
	for _, s := range subs {
		u0 := time.Now()
		uctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := s.Unsubscribe(uctx)
		cancel()
		d := time.Since(u0)
		slowest = max(slowest, d)
		if err != nil || d > 2*time.Second {
			t.Errorf("Unsubscribe of a %s subscription: %v after %v", s.Topic(), err, d.Round(time.Millisecond))
		}
	}
	for i, b := range bes {
		c0 := time.Now()
		err := b.Close()
		if d := time.Since(c0); err != nil || d > 2*time.Second {
			t.Errorf("Backend %d's Close: %v after %v", i, err, d.Round(time.Millisecond))
		}
	}
	t.Logf("%d events published in %v, all acked or dead-lettered %v after the first Publish; %d runs; slowest Unsubscribe %v",
		len(kind), published.Round(time.Millisecond), allDone.Round(time.Millisecond), nRuns, slowest.Round(time.Millisecond))
}
