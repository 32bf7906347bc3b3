package redisstreams

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// Found by review 8 of 2026-11-22: the commands that set a read guard could
// themselves reach the server late and lower it (or bring it back after the
// subscription ended), so that a late read ran again: e2 dead-lettered unrun
// under MaxDeliveries(1) in every run of the first two tests before; the
// third found the ended subscription's guard back at 0 for 10 minutes.
// The guard is now created by a round trip go-redis never retries (only if
// missing) and raised only upwards (raise_guard.lua), and a subscription
// that may have late commands leaves a tombstone instead of deleting it.

// TestLateGuardCreateFailsSubscribe: the subscription's first round trip
// (XGROUP CREATE + the guard) is held by the network past ReadTimeout.
// go-redis must not retry it: Subscribe fails (review 8 found that a retried
// creation, delivered late, lowered the guard of a live subscription, which
// let a late read run). The late copy, released after a second Subscribe
// started, creates at most the guard of the consumer that never read, with
// a TTL, and the live subscription runs everything once, as first
// attempts.
func TestLateGuardCreateFailsSubscribe(t *testing.T) {
	t.Parallel()
	redistest.Require(t)
	srv := redistest.Start(t, redistest.Options{})
	px := redistest.NewProxy(t, srv.Addr())
	ctx := context.Background()
	b := urlBackend(t, "redis://"+px.Addr(), Options{})
	c := srv.Client(t)
	var (
		mu  sync.Mutex
		ran []string
	)
	handler := func(ctx context.Context, e pubsub.Event) error {
		mu.Lock()
		ran = append(ran, fmt.Sprintf("%s#%d", e.Data, e.DeliveryAttempt))
		mu.Unlock()
		return nil
	}
	opts := []pubsub.SubscribeOption{pubsub.Group("g"), pubsub.StartFrom(pubsub.Earliest), pubsub.ReadOnDemand(),
		pubsub.MaxDeliveries(1), pubsub.AckDeadline(time.Second)}
	px.HoldNext(func(b []byte) bool {
		s := strings.ToUpper(string(b))
		return strings.Contains(s, "XGROUP") && strings.Contains(s, "RGUARD")
	})
	failedGuard := b.keys.StreamMeta("t", "rguard:"+b.consumer+"-1")
	if sub, err := b.Subscribe(ctx, "t", handler, opts...); err == nil {
		_ = sub.Unsubscribe(ctx)
		t.Fatal("Subscribe succeeded although its first round trip was held past ReadTimeout (go-redis retried it)")
	}
	sub, err := b.Subscribe(ctx, "t", handler, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe(ctx)
	if n := px.Release(); n != 1 {
		t.Fatalf("released %d held connections, want 1", n)
	}
	if ttl, err := c.PTTL(ctx, failedGuard).Result(); err != nil || ttl > readGuardTTL || ttl == -1 {
		t.Fatalf("guard of the failed subscription: pttl %v, %v; want none or within %v", ttl, err, readGuardTTL)
	}
	for _, d := range []string{"e1", "e2"} {
		if err := b.Publish(ctx, "t", pubsub.Event{Type: "x", Data: []byte(d)}); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		mu.Lock()
		got := strings.Join(ran, " ")
		mu.Unlock()
		if got == "e1#1 e2#1" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("ran %q, want e1#1 e2#1", got)
		}
		sub.(pubsub.Kicker).Kick()
		time.Sleep(20 * time.Millisecond)
	}
}

// Variant: the NOGUARD re-creation (readLoop's plain SET guard readSeq) delivered late.
func TestLateGuardRecreateKeepsStaleReadOut(t *testing.T) {
	t.Parallel()
	r := newLateRig(t)
	ctx := context.Background()
	r.publish("e1")
	r.waitFor("e1 run", func() bool { return r.ranAll("e1#1") })
	// The guard is lost (a restart without persistence, a failover to a
	// replica that did not get it): the next read is refused (NOGUARD) and
	// readLoop sets it again, which the network holds.
	r.px.HoldNext(func(b []byte) bool {
		s := strings.ToUpper(string(b))
		return strings.Contains(s, "RGUARD") && !strings.Contains(s, "EVALSHA")
	})
	if err := r.srv.Client(t).Del(ctx, r.g.guard).Err(); err != nil {
		t.Fatal(err)
	}
	r.publish("e1b")
	r.waitFor("e1b run", func() bool { return r.ranAll("e1#1", "e1b#1") })

	r.holdNextRead()
	r.waitChecksEnded()
	r.publish("e2")
	if n := r.px.Release(); n != 2 {
		t.Fatalf("released %d held connections, want 2", n)
	}
	r.waitFor("e2 run", func() bool { return r.ranAll("e1#1", "e1b#1", "e2#1") || r.dead.Load() > 0 || r.ranCount() > 2 })
	time.Sleep(3 * time.Second)
	if got := r.result(); got != "e1#1 e1b#1 e2#1" || r.dead.Load() > 0 {
		t.Fatalf("ran %v and dead-lettered %d; want e1#1 e1b#1 e2#1 and nothing dead-lettered", got, r.dead.Load())
	}
}
