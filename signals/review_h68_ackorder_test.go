package signals_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

// slowInboxAck is a go-redis hook that holds the first ack of inbox (the
// acker's delete_drained.lua call) for stall before sending it, as a slow
// master would, and records when that ack returned and when the first ack
// of the work stream (the wake notice's) was sent.
type slowInboxAck struct {
	inbox, work string
	stall       time.Duration

	mu          sync.Mutex
	inboxAcking bool
	inboxAcked  time.Time // zero until the inbox ack returned
	workAckAt   time.Time // the first work ack sent while the inbox ack was held or after
	held        bool
}

func (h *slowInboxAck) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *slowInboxAck) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		hold := h.check([]redis.Cmder{cmd})
		err := next(ctx, cmd)
		h.after(hold)
		return err
	}
}

func (h *slowInboxAck) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		hold := h.check(cmds)
		err := next(ctx, cmds)
		h.after(hold)
		return err
	}
}

func isAckOf(c redis.Cmder, key string) bool {
	args := c.Args()
	name, _ := args[0].(string)
	switch name {
	case "xack":
		k, _ := args[1].(string)
		return k == key
	case "eval", "evalsha":
		if len(args) < 7 {
			return false
		}
		k, _ := args[3].(string)
		_, expiry := args[5].(int64) // delete_drained.lua in its ack mode
		return k == key && expiry
	}
	return false
}

func (h *slowInboxAck) check(cmds []redis.Cmder) bool {
	hold := false
	for _, c := range cmds {
		if isAckOf(c, h.work) {
			h.mu.Lock()
			if h.held && h.workAckAt.IsZero() {
				h.workAckAt = time.Now()
			}
			h.mu.Unlock()
		}
		if isAckOf(c, h.inbox) {
			h.mu.Lock()
			if !h.held {
				h.held, h.inboxAcking, hold = true, true, true
			}
			h.mu.Unlock()
		}
	}
	if hold {
		time.Sleep(h.stall) // the slow master (a go-redis hook: no clock to inject)
	}
	return hold
}

func (h *slowInboxAck) after(hold bool) {
	if !hold {
		return
	}
	h.mu.Lock()
	h.inboxAcking = false
	h.inboxAcked = time.Now()
	h.mu.Unlock()
}

// TestReviewH68NoticeAckWaitsForSlowInboxAck (review h68): doc.go says the
// owner acks a signal's wake notice only after the signal's inbox entry, so
// that a process killed between the two acks leaves the notice (and a live
// runtime then looks at the inbox). On a Cluster the inbox and the work
// stream are on different masters, acked in different acker lanes; when
// the inbox's master is slow for longer than the notice handler's hold
// (at most 250ms, 20ms on a redelivered notice), session.awaitAck times
// out and handleNotice acks the notice anyway: the notice's ack is written
// while the inbox ack is still in flight, and a process killed in that
// window leaves the inbox for ever (TestReviewH65OwnNoticeAckBeforeInboxAck's
// finding).
func TestReviewH68NoticeAckWaitsForSlowInboxAck(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	c := cl.Client(t)
	ctx := context.Background()
	const prefix = "h68ord"
	work := prefix + ":{" + signals.WorkTopic + "}"
	wm, err := c.MasterForKey(ctx, work)
	if err != nil {
		t.Fatal(err)
	}
	thread := ""
	for i := range 100 {
		th := fmt.Sprint("h68-", i)
		m, err := c.MasterForKey(ctx, prefix+":{"+signals.InboxTopic(th)+"}")
		if err != nil {
			t.Fatal(err)
		}
		if m.Options().Addr != wm.Options().Addr {
			thread = th
			break
		}
	}
	if thread == "" {
		t.Fatal("no thread whose inbox is on another master than the work stream")
	}
	inbox := prefix + ":{" + signals.InboxTopic(thread) + "}"
	hook := &slowInboxAck{inbox: inbox, work: work, stall: 1500 * time.Millisecond}
	rc := redis.NewClusterClient(cl.ClientOptions())
	t.Cleanup(func() { rc.Close() })
	rc.AddHook(hook)
	b, err := redisstreams.New(rc, redisstreams.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	ran := make(chan struct{}, 1)
	rt := newRuntime(t, b, func(ctx context.Context, r *signals.Run) error {
		select {
		case ran <- struct{}{}:
		default:
		}
		return nil
	}, signals.WithLeaseTTL(4*time.Second), signals.WithLinger(3*time.Second))
	if _, err := rt.Send(ctx, thread, signals.Signal{ID: "s1", Type: "msg"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ran:
	case <-time.After(30 * time.Second):
		t.Fatal("the signal did not run within 30s")
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		hook.mu.Lock()
		acked, workAt := hook.inboxAcked, hook.workAckAt
		hook.mu.Unlock()
		if !acked.IsZero() && !workAt.IsZero() {
			if workAt.Before(acked) {
				t.Fatalf("the wake notice's ack was sent %v before the inbox ack returned (held %v): "+
					"a process killed in between leaves no notice and the inbox for ever",
					acked.Sub(workAt).Round(time.Millisecond), hook.stall)
			}
			t.Logf("notice ack sent %v after the inbox ack returned", workAt.Sub(acked).Round(time.Millisecond))
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("within 30s: inbox ack returned at %v, notice ack sent at %v", acked, workAt)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
