package redisstreams

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// handBackHold makes the first hand_back.lua call wait until its ctx ends
// and fail with it, unsent (a cancel that reaches go-redis before it
// writes the command).
type handBackHold struct {
	fired chan struct{}
	once  atomic.Bool
}

func (h *handBackHold) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *handBackHold) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		a := cmd.Args()
		isHB := len(a) > 1 && ((strings.EqualFold(cmd.Name(), "evalsha") && a[1] == handBackScript.Hash()) ||
			(strings.EqualFold(cmd.Name(), "eval") && a[1] == handBackLua))
		if isHB && h.once.CompareAndSwap(false, true) {
			close(h.fired)
			<-ctx.Done()
			cmd.SetErr(ctx.Err())
			return ctx.Err()
		}
		return next(ctx, cmd)
	}
}
func (h *handBackHold) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestReview55UnsubscribeDuringStuckHandBack: groupSub.Unsubscribe "hands
// back the entries no handler started" (cleanup: "undo the delivery count
// of our read, so the next consumer sees its first attempt").
//
// Member A's one handler hangs on e0 (ack deadline 1s); e1-e3 are queued
// behind it. refreshQueued marks them lost and calls handBackQueued on
// g.ctx; A is unsubscribed while that call is in flight (the hook holds it
// until g.ctx ends, as a cancel that reaches go-redis before the write
// would). cleanup skips lost entries ("taken over by another member"), so
// e1-e3, which nobody took and no handler ran, are not handed back: they
// stay on A's stopped consumer until their ack deadline, and member B gets
// them as attempt 2 (with MaxDeliveries(1) they would be dead-lettered
// without a run).
func TestReview55UnsubscribeDuringStuckHandBack(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	prefix := psPrefix()
	a := urlBackend(t, srv.URL(), Options{Prefix: prefix})
	hold := &handBackHold{fired: make(chan struct{})}
	a.client.AddHook(hold)
	ctx := context.Background()
	started := make(chan struct{}, 1)
	subA, err := a.Subscribe(ctx, "t", func(ctx context.Context, e pubsub.Event) error {
		select {
		case started <- struct{}{}:
		default:
		}
		<-ctx.Done()
		return errors.New("stopped")
	}, pubsub.Group("g"), pubsub.AckDeadline(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		if err := a.Publish(ctx, "t", pubsub.Event{ID: fmt.Sprint("e", i), Type: "x"}); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			<-started
		}
	}
	select {
	case <-hold.fired:
	case <-time.After(5 * time.Second):
		t.Fatal("no hand-back of the queued entries within 5s")
	}
	if err := subA.Unsubscribe(ctx); err != nil {
		t.Fatal(err)
	}
	b := urlBackend(t, srv.URL(), Options{Prefix: prefix})
	var mu sync.Mutex
	attempts := map[string]int{}
	subB, err := b.Subscribe(ctx, "t", func(ctx context.Context, e pubsub.Event) error {
		mu.Lock()
		attempts[e.ID] = e.DeliveryAttempt
		mu.Unlock()
		return nil
	}, pubsub.Group("g"), pubsub.AckDeadline(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer subB.Unsubscribe(ctx)
	deadline := time.Now().Add(8 * time.Second)
	for time.Now().Before(deadline) {
		mu.Lock()
		n := len(attempts)
		mu.Unlock()
		if n == 4 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("B's deliveries (id: attempt): %v", attempts)
	for _, id := range []string{"e1", "e2", "e3"} {
		if got, ok := attempts[id]; !ok || got != 1 {
			t.Errorf("%s, read by A and never run, reached B as attempt %d (delivered: %v); want 1: Unsubscribe hands back unstarted entries with the count of the read undone", id, got, ok)
		}
	}
}
