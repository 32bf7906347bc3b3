package redisstreams

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// TestOnDemandPassSlotsNotHeld: four on-demand subscriptions (busy
// threads of the signals runtime: a run in progress, so their one token is
// taken, kicked by the signals sent to them meanwhile), each of whose
// groups has a silent member holding an entry (a stale owner that read a
// signal after the new tenure subscribed). A fifth on-demand subscription
// whose entry a silent member holds is kicked, and must reclaim it within
// five ack deadlines. Review revR (helper 23): the busy ones waited a
// reclaim interval for a token while holding their pass slot, and their
// ticker had ticked again by then, so they kept all four slots: the fifth
// reclaimed its entry only once they were no longer kicked (10.2s; 101ms
// with no bound on the slots, the control case "unbounded").
func TestOnDemandPassSlotsNotHeld(t *testing.T) {
	t.Run("bounded", func(t *testing.T) { onDemandSlotsHeld(t) })
	t.Run("unbounded", func(t *testing.T) {
		// Control: the same with no bound (as before caceac8).
		old := onDemandPasses
		onDemandPasses = 1000
		t.Cleanup(func() { onDemandPasses = old })
		onDemandSlotsHeld(t)
	})
}

func onDemandSlotsHeld(t *testing.T) {
	ctx := context.Background()
	b := slotsBackend(t)
	c := b.Client()
	const ackDeadline = 200 * time.Millisecond
	ghostRead := func(topic string) {
		t.Helper()
		res, err := c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "ghost", Streams: []string{b.keys.Stream(topic), ">"}, Count: 1, Block: -1}).Result()
		if err != nil || len(res) != 1 || len(res[0].Messages) != 1 {
			t.Fatalf("ghost read of %s: %v %v", topic, res, err)
		}
	}
	var hogs []pubsub.Kicker
	for i := range 4 {
		topic := fmt.Sprint("hog", i)
		if err := b.Publish(ctx, topic, pubsub.Event{ID: "busy", Type: "x"}); err != nil {
			t.Fatal(err)
		}
		started := make(chan struct{}, 1)
		sub, err := b.Subscribe(ctx, topic, func(ctx context.Context, ev pubsub.Event) error {
			started <- struct{}{}
			<-ctx.Done() // a long run
			return ctx.Err()
		}, pubsub.Group("g"), pubsub.ReadOnDemand(), pubsub.ClaimPending(), pubsub.StartFrom(pubsub.Earliest), pubsub.AckDeadline(ackDeadline))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe(context.Background()) })
		select {
		case <-started:
		case <-time.After(10 * time.Second):
			t.Fatal("hog's handler did not start")
		}
		if err := b.Publish(ctx, topic, pubsub.Event{ID: "stale", Type: "x"}); err != nil {
			t.Fatal(err)
		}
		ghostRead(topic)
		hogs = append(hogs, sub.(pubsub.Kicker))
	}
	var (
		mu  sync.Mutex
		got = map[string]time.Time{}
	)
	victim, err := b.Subscribe(ctx, "victim", func(ctx context.Context, ev pubsub.Event) error {
		mu.Lock()
		got[ev.ID] = time.Now()
		mu.Unlock()
		return nil
	}, pubsub.Group("g"), pubsub.ReadOnDemand(), pubsub.ClaimPending(), pubsub.StartFrom(pubsub.Earliest), pubsub.AckDeadline(ackDeadline))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = victim.Unsubscribe(context.Background()) })
	time.Sleep(300 * time.Millisecond) // its first read is over
	if err := b.Publish(ctx, "victim", pubsub.Event{ID: "e", Type: "x"}); err != nil {
		t.Fatal(err)
	}
	ghostRead("victim")
	// Stale (idle past the ack deadline) before the kick, so that the
	// kick's first pass can claim it.
	time.Sleep(ackDeadline + 100*time.Millisecond)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			for _, h := range hogs {
				h.Kick()
			}
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	})
	start := time.Now()
	victim.(pubsub.Kicker).Kick()
	var took time.Duration
	for deadline := start.Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		at, ok := got["e"]
		mu.Unlock()
		if ok {
			took = at.Sub(start)
			break
		}
	}
	close(stop)
	wg.Wait()
	if took == 0 {
		// Once the hogs are no longer kicked their passes are short again.
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			mu.Lock()
			at, ok := got["e"]
			mu.Unlock()
			if ok {
				t.Fatalf("the entry a silent member held was reclaimed only %v after the kick, %v after the other subscriptions stopped being kicked (ack deadline %v)",
					at.Sub(start).Round(time.Millisecond), time.Since(at).Round(time.Millisecond), ackDeadline)
			}
		}
		t.Fatalf("the entry a silent member held was not reclaimed in 15s (ack deadline %v)", ackDeadline)
	}
	t.Logf("reclaimed %v after the kick", took.Round(time.Millisecond))
	if took > 5*ackDeadline {
		t.Errorf("reclaimed %v after the kick, want within %v", took.Round(time.Millisecond), 5*ackDeadline)
	}
}

// TestOnDemandKickBeforeStale: an on-demand subscription kicked once while
// the entry a silent member holds is not yet past the ack deadline. Review
// revR (helper 23), older than the bound on the passes: the next pass used
// the kick up (kicked.Swap(false)) and claimed nothing (not stale yet), and
// no later pass looked, as none was kicked: not reclaimed 4s after the
// kick (ack deadline 200ms). Now a pass that sees another consumer holding
// entries notes itself kicked again.
func TestOnDemandKickBeforeStale(t *testing.T) {
	ctx := context.Background()
	b := slotsBackend(t)
	c := b.Client()
	const ackDeadline = 200 * time.Millisecond
	var got atomic.Int64
	victim, err := b.Subscribe(ctx, "victim", func(ctx context.Context, ev pubsub.Event) error {
		got.Add(1)
		return nil
	}, pubsub.Group("g"), pubsub.ReadOnDemand(), pubsub.ClaimPending(), pubsub.StartFrom(pubsub.Earliest), pubsub.AckDeadline(ackDeadline))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = victim.Unsubscribe(context.Background()) })
	time.Sleep(300 * time.Millisecond)
	if err := b.Publish(ctx, "victim", pubsub.Event{ID: "e", Type: "x"}); err != nil {
		t.Fatal(err)
	}
	res, err := c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "ghost", Streams: []string{b.keys.Stream("victim"), ">"}, Count: 1, Block: -1}).Result()
	if err != nil || len(res) != 1 {
		t.Fatal(res, err)
	}
	victim.(pubsub.Kicker).Kick()
	for deadline := time.Now().Add(20 * ackDeadline); got.Load() == 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if got.Load() == 0 {
		t.Fatalf("the entry the silent member holds was not reclaimed %v after the kick (ack deadline %v)", 20*ackDeadline, ackDeadline)
	}
}

// slotsBackend starts a redis-server and returns a NewURL Backend on it
// (go-redis's default pool), closed when the test ends.
func slotsBackend(t *testing.T) *Backend {
	t.Helper()
	redistest.Require(t)
	srv := redistest.Start(t, redistest.Options{})
	b := urlBackend(t, srv.URL(), Options{Prefix: "slots"})
	return b
}
