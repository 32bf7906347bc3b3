package redisstreams

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// flushCheckGate runs fire once, before the first pipeline of a group
// caughtUp check (XINFO GROUPS then XPENDING of one consumer) that comes
// after it is armed.
type flushCheckGate struct {
	armed atomic.Bool
	once  sync.Once
	fire  func()
}

func (h *flushCheckGate) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *flushCheckGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return next
}
func (h *flushCheckGate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.armed.Load() && len(cmds) == 2 && strings.EqualFold(cmds[0].Name(), "xinfo") && strings.EqualFold(cmds[1].Name(), "xpending") {
			h.once.Do(h.fire)
		}
		return next(ctx, cmds)
	}
}

// TestReview55FlushRacesANack: pubsub.PubSub.Flush "waits until work the
// backend does after Publish returns has been done: local deliveries handed
// to handlers"; Backend.Flush: "until every event this Backend published
// before the call has been handled by this Backend's subscriptions ...
// An event a handler nacked, waiting here for its redelivery, does not hold
// it up".
//
// A Concurrency(1) group member runs e1 and has e2 (the Flush target) read
// ahead, queued behind it. groupSub.caughtUp counts the entries nacked here
// (nackedCount: 0), then lists Count = nackedCount+1 = 1 pending entry. If
// e1's handler nacks between the count and the listing (one round trip;
// the hook makes it happen there), the listing holds e1 only, e1 is nacked
// (resting) by the time it is looked at, and caughtUp reports the
// subscription caught up: Flush returns nil although e2 was never handed to
// a handler (it waits behind e1's 10s redelivery delay).
func TestReview55FlushRacesANack(t *testing.T) {
	for _, conc := range []int{1, 2} {
		t.Run(map[int]string{1: "c1", 2: "c2"}[conc], func(t *testing.T) {
			srv := redistest.Start(t, redistest.Options{})
			b := urlBackend(t, srv.URL(), Options{Prefix: psPrefix()})
			ctx := context.Background()
			nackNow := make(chan struct{})
			release := make(chan struct{})
			var e2Started, e2Done atomic.Bool
			sub, err := b.Subscribe(ctx, "t", func(ctx context.Context, e pubsub.Event) error {
				switch e.ID {
				case "e1":
					if e.DeliveryAttempt == 1 {
						select {
						case <-nackNow:
						case <-ctx.Done():
						}
						return errors.New("nack")
					}
				case "e2":
					e2Started.Store(true)
					select {
					case <-release:
					case <-ctx.Done():
					}
					e2Done.Store(true)
				}
				return nil
			}, pubsub.Group("g"), pubsub.Concurrency(conc), pubsub.AckDeadline(30*time.Second),
				pubsub.RedeliveryDelay(10*time.Second), pubsub.RedeliveryCap(10*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				close(release)
				_ = sub.Unsubscribe(ctx)
			}()
			g := sub.(*groupSub)
			for _, id := range []string{"e1", "e2"} {
				if err := b.Publish(ctx, "t", pubsub.Event{ID: id, Type: "x"}); err != nil {
					t.Fatal(err)
				}
			}
			// Both read: e1 running, e2 queued (c1) or running (c2).
			deadline := time.Now().Add(5 * time.Second)
			for {
				g.mu.Lock()
				n := len(g.inflight)
				g.mu.Unlock()
				if n == 2 || time.Now().After(deadline) {
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
			var e1ID string
			g.mu.Lock()
			for id, m := range g.inflight {
				if e1ID == "" || compareStreamIDs(id, e1ID) < 0 {
					e1ID = id
				}
				_ = m
			}
			g.mu.Unlock()
			gate := &flushCheckGate{fire: func() {
				close(nackNow)
				for end := time.Now().Add(3 * time.Second); !g.nacked(e1ID) && time.Now().Before(end); {
					time.Sleep(time.Millisecond)
				}
			}}
			b.client.AddHook(gate)
			gate.armed.Store(true)
			fctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			start := time.Now()
			err = b.Flush(fctx)
			started, done := e2Started.Load(), e2Done.Load()
			t.Logf("Flush = %v after %v; e2 handed to a handler: %v, handled: %v", err, time.Since(start).Round(time.Millisecond), started, done)
			if err == nil && !done {
				t.Errorf("Flush returned nil while e2 (published before it) was not handled (handed to a handler: %v)", started)
			}
		})
	}
}
