package signals_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/signals"
)

// cutBeforeInboxAck is a go-redis hook that black-holes proxy just before
// the first write that carries an ack of inbox (the acker's
// delete_drained.lua call): the process is cut off for good (as a SIGKILL
// there) after whatever it wrote before, and before its inbox ack.
type cutBeforeInboxAck struct {
	inbox string
	proxy *redistest.Proxy
	once  sync.Once
	cut   chan struct{}
}

func (h *cutBeforeInboxAck) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *cutBeforeInboxAck) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.check([]redis.Cmder{cmd})
		return next(ctx, cmd)
	}
}

func (h *cutBeforeInboxAck) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.check(cmds)
		return next(ctx, cmds)
	}
}

func (h *cutBeforeInboxAck) check(cmds []redis.Cmder) {
	for _, c := range cmds {
		args := c.Args()
		if len(args) < 7 {
			continue
		}
		name, _ := args[0].(string)
		key, _ := args[3].(string)
		_, expiry := args[5].(int64) // publish_for.lua has the entry's fields there
		if (name == "evalsha" || name == "eval") && key == h.inbox && len(args) > 6 && expiry {
			// delete_drained.lua in its ack mode: key, group, expiry, ids.
			h.once.Do(func() {
				h.proxy.BlackHole()
				close(h.cut)
			})
			return
		}
	}
}

// TestReviewH65OwnNoticeAckBeforeInboxAck (review h65): the owner's own
// wake-notice handler returns as soon as the run's signals are marked seen
// (session.await: awaitDone), which races the inbox handler's return, and
// the backend's acker writes the two acks in whatever batches they fall in
// (on a Cluster, in different lanes: the work topic and the inbox live on
// different masters). When the notice's ack is written first and the
// process is cut off (or killed) before the inbox ack, no notice is left to
// bring a peer to the thread, the inbox entry stays pending on the dead
// consumer, the inbox never drains and so never gets its expiry: it stays
// for ever.
func TestReviewH65OwnNoticeAckBeforeInboxAck(t *testing.T) {
	srv, c := startRedis(t)
	ctx := context.Background()
	const prefix, thread = "h65ord", "ho"
	inbox := prefix + ":{" + signals.InboxTopic(thread) + "}"
	work := prefix + ":{" + signals.WorkTopic + "}"
	proxy := redistest.NewProxy(t, srv.Addr())
	hook := &cutBeforeInboxAck{inbox: inbox, proxy: proxy, cut: make(chan struct{})}
	agent := func(ctx context.Context, r *signals.Run) error { return nil }
	opts := []signals.Option{signals.WithLeaseTTL(procTTL), signals.WithRecoveryInterval(200 * time.Millisecond),
		signals.WithLinger(300 * time.Millisecond), signals.WithInboxExpiryFloor(0)}
	// A alone in the work group: its own handler takes the notice.
	a, stopA := urlRuntime(t, "redis://"+proxy.Addr(), prefix, "A", agent, hook, opts...)
	defer func() {
		proxy.Restore()
		stopA()
	}()
	if _, err := a.Send(ctx, thread, signals.Signal{ID: "s1", Type: "msg"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-hook.cut:
	case <-time.After(30 * time.Second):
		t.Fatal("no inbox ack within 30s")
	}
	cutAt := time.Now()
	// A live peer, from now on.
	urlRuntime(t, srv.URL(), prefix, "B", agent, nil, opts...)
	const bound = 40 * time.Second
	for {
		n, err := c.Exists(ctx, inbox).Result()
		if err != nil {
			t.Fatal(err)
		}
		wp, err := c.XPending(ctx, work, signals.WorkGroup).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 && wp.Count == 0 {
			t.Logf("inbox gone %v after the cut", time.Since(cutAt).Round(100*time.Millisecond))
			return
		}
		if time.Since(cutAt) > bound {
			var ip int64 = -1
			if p, err := c.XPending(ctx, inbox, signals.InboxGroup).Result(); err == nil {
				ip = p.Count
			}
			t.Fatalf("%v after A was cut off: inbox exists=%d (pending %d, PTTL %v), %d wake notices pending: "+
				"the notice was acked before the inbox entry, and the inbox stays for ever",
				bound, n, ip, c.PTTL(ctx, inbox).Val(), wp.Count)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
