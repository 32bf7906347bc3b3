package signals_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

// cutAfterRecord is a go-redis hook that black-holes proxy once a command
// writing thread's done record got its reply: the process is cut off from
// the server for good right after its run was recorded done and before the
// backend's acker wrote the inbox entry's ack (the same state a SIGKILL in
// that window leaves: the signal in the done record, its inbox entry
// pending on the dead consumer).
type cutAfterRecord struct {
	key   string
	proxy *redistest.Proxy
	once  sync.Once
	cut   chan struct{}
}

func (h *cutAfterRecord) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *cutAfterRecord) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.check(cmd)
		return err
	}
}

func (h *cutAfterRecord) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			h.check(c)
		}
		return err
	}
}

func (h *cutAfterRecord) check(cmd redis.Cmder) {
	if cmd.Err() != nil {
		return
	}
	// The write, not the tenure's read of the record as it starts: its
	// arguments carry the new record ("r2:...").
	key, value := false, false
	for _, a := range cmd.Args() {
		if s, ok := a.(string); ok {
			key = key || strings.Contains(s, h.key)
			value = value || strings.HasPrefix(s, "r2:")
		}
	}
	if key && value {
		h.once.Do(func() {
			h.proxy.BlackHole()
			close(h.cut)
		})
	}
}

var _ redis.Hook = (*cutAfterRecord)(nil)

// TestReviewH65CutAfterRecordLeavesInbox (review h65): "A process killed
// (or cut off from the server for good) ... cannot delete them: on
// redisstreams each inbox then goes on its own" and "After the longest of
// those an idle thread leaves nothing". A process cut off (or killed) in
// the window between its run's done-record write and the backend's batched
// write of the inbox ack leaves the inbox with the entry pending on its
// dead consumer: not drained, so delete_drained.lua never set its expiry.
// The signal's wake notice comes back to a live runtime, which finds the
// signal in the done record and acks the notice without looking at the
// inbox: nothing ever names the thread again, and the inbox (stream, group,
// consumer) stays for ever, with no expiry.
func TestReviewH65CutAfterRecordLeavesInbox(t *testing.T) {
	srv, c := startRedis(t)
	ctx := context.Background()
	const prefix, thread = "h65cut", "hx"
	proxy := redistest.NewProxy(t, srv.Addr())
	hook := &cutAfterRecord{key: signals.RecordKey(thread), proxy: proxy, cut: make(chan struct{})}
	ran := make(chan string, 16)
	agent := func(ctx context.Context, r *signals.Run) error {
		for _, s := range r.Signals {
			ran <- s.ID
		}
		return nil
	}
	opts := []signals.Option{signals.WithLeaseTTL(procTTL), signals.WithRecoveryInterval(200 * time.Millisecond),
		signals.WithLinger(300 * time.Millisecond), signals.WithInboxExpiryFloor(0)}
	a, stopA := urlRuntime(t, "redis://"+proxy.Addr(), prefix, "A", agent, hook, opts...)
	urlRuntime(t, srv.URL(), prefix, "B", agent, nil, opts...)
	look, err := redisstreams.NewURL(ctx, srv.URL(), redisstreams.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer look.Close()
	defer func() {
		proxy.Restore()
		stopA()
	}()

	acc, err := a.Send(ctx, thread, signals.Signal{ID: "s1", Type: "msg"})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Send: %v", acc.Action)
	select {
	case <-hook.cut:
	case <-time.After(30 * time.Second):
		t.Fatal("the done record was not written within 30s")
	}
	cutAt := time.Now()
	select {
	case id := <-ran:
		t.Logf("ran %s", id)
	case <-time.After(10 * time.Second):
		t.Fatal("s1 did not run")
	}
	inbox := prefix + ":{" + signals.InboxTopic(thread) + "}"
	work := prefix + ":{" + signals.WorkTopic + "}"
	// The premise: s1 is in the done record, so a live runtime acks its
	// notice (after A's copy came back from the dead consumer).
	rec, err := look.GetLeaseOwner(ctx, signals.RecordKey(thread))
	if err != nil || !signals.RecordHas(rec, "s1") {
		t.Fatalf("s1 not in the done record (%q, %v)", rec, err)
	}
	// inboxExpiry here: 3 first waits (600ms) and 2 TTLs = 5.8s; the lease
	// lapses 2s after the cut. Generous bound for a loaded machine.
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
				"the inbox stays for ever, no notice names its thread any more",
				bound, n, ip, c.PTTL(ctx, inbox).Val(), wp.Count)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
