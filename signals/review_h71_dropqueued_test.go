package signals_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

// slowInboxReads is a go-redis hook that, while on, delays every command
// (or pipeline) that reads thread's inbox through its read guard
// (redisstreams' read.lua names the guard key, "…:rguard:…"), as a loaded
// client's pool does.
type slowInboxReads struct {
	inbox string
	delay time.Duration
	on    atomic.Bool
	hits  atomic.Int64
}

func (h *slowInboxReads) match(cmds ...redis.Cmder) bool {
	if !h.on.Load() {
		return false
	}
	for _, c := range cmds {
		guard, inbox := false, false
		for _, a := range c.Args() {
			if s, ok := a.(string); ok {
				guard = guard || strings.Contains(s, ":rguard:")
				inbox = inbox || strings.Contains(s, h.inbox)
			}
		}
		if guard && inbox {
			return true
		}
	}
	return false
}

func (h *slowInboxReads) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *slowInboxReads) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.match(cmd) {
			h.hits.Add(1)
			time.Sleep(h.delay)
		}
		return next(ctx, cmd)
	}
}

func (h *slowInboxReads) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.match(cmds...) {
			h.hits.Add(1)
			time.Sleep(h.delay)
		}
		return next(ctx, cmds)
	}
}

// TestReviewH71DropQueuedSurvivesTenureEnd (review h71; found by
// TestReviewH71SignalsFootprint, where 12-25% of the signals queued behind
// a cancelled run ran at 10,000 threads, none at 1,000): Cancel with
// DropQueued reaches the owner's running run (Cancelled: true, the owner
// neither died nor lost the thread), and the two signals queued before the
// cancel must be dropped. The drop is kept only in the tenure (session) in
// memory: when the owner's next inbox read takes longer than the linger
// time (a loaded pool; here a hook delays it 300ms against a 20ms linger),
// the tenure ends with the signals still unread, releases, finds them in
// the inbox (afterRelease) and starts a Recovered tenure, which knows of no
// drop: both signals run, and the mark, read after them, drops nothing.
// The package doc promises the drop except when the owner "dies or loses
// the thread before reaching the mark".
func TestReviewH71DropQueuedSurvivesTenureEnd(t *testing.T) {
	srv, _ := startRedis(t)
	ctx := context.Background()
	const thread = "dq"
	hook := &slowInboxReads{inbox: signals.InboxTopic(thread), delay: 300 * time.Millisecond}
	var mu sync.Mutex
	ran := map[string]int{}
	started := make(chan struct{}, 1)
	agent := func(ctx context.Context, run *signals.Run) error {
		sigs := run.Signals
		for {
			for _, s := range sigs {
				mu.Lock()
				ran[s.ID]++
				mu.Unlock()
				if s.ID == "hang" {
					started <- struct{}{}
					<-ctx.Done()
					return ctx.Err()
				}
			}
			s, ok := run.Next(ctx)
			if !ok {
				return nil
			}
			sigs = []signals.Signal{s}
		}
	}
	rt, _ := urlRuntime(t, srv.URL(), "h71dq", "A", agent, hook,
		signals.WithLeaseTTL(2*time.Second), signals.WithRecoveryInterval(200*time.Millisecond), signals.WithLinger(20*time.Millisecond))
	if _, err := rt.Send(ctx, thread, signals.Signal{ID: "hang", Type: "t"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the first run did not start")
	}
	for _, id := range []string{"q1", "q2"} {
		acc, err := rt.Send(ctx, thread, signals.Signal{ID: id, Type: "t"})
		if err != nil {
			t.Fatal(err)
		}
		if acc.Action != signals.Delivered {
			t.Fatalf("Send %s: %v, want Delivered (the run holds the thread)", id, acc.Action)
		}
	}
	hook.on.Store(true) // the owner's inbox reads get slow, as on a loaded pool
	res, err := rt.Cancel(ctx, thread, "stop", signals.DropQueued())
	if err != nil {
		t.Fatal(err)
	}
	if !res.Cancelled {
		t.Fatalf("Cancel = %+v, want the running run cancelled", res)
	}
	// A signal sent after Cancel returned runs; by then the queue is
	// settled either way.
	if _, err := rt.Send(ctx, thread, signals.Signal{ID: "after", Type: "t"}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; {
		mu.Lock()
		n := ran["after"]
		mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the signal sent after Cancel did not run within 20s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("ran %v (slowed %d inbox reads)", ran, hook.hits.Load())
	if ran["q1"] != 0 || ran["q2"] != 0 {
		t.Errorf("Cancel(DropQueued) returned Cancelled for the owner's running run, yet the signals queued before it ran: q1 %d times, q2 %d times", ran["q1"], ran["q2"])
	}
}

// TestReviewH71DropPendingWithMarkGoneEndsTenure (review h71): the tenure
// that reads on past its linger time while a drop is pending (its mark not
// read yet) stops doing so once the inbox holds nothing more for it: a
// mark that will never come (deleted from the inbox by hand after Cancel
// returned) does not hold the thread for half the dedupe window (30 minutes
// by default), dropping what is sent meanwhile. The tenure drops the two
// queued signals and releases the thread within seconds.
func TestReviewH71DropPendingWithMarkGoneEndsTenure(t *testing.T) {
	srv, c := startRedis(t)
	ctx := context.Background()
	const prefix, thread = "h71dg", "dg"
	hook := &slowInboxReads{inbox: signals.InboxTopic(thread), delay: 300 * time.Millisecond}
	var mu sync.Mutex
	ran := map[string]int{}
	started := make(chan struct{}, 1)
	agent := func(ctx context.Context, run *signals.Run) error {
		for _, s := range run.Signals {
			mu.Lock()
			ran[s.ID]++
			mu.Unlock()
			if s.ID == "hang" {
				started <- struct{}{}
				<-ctx.Done()
				return ctx.Err()
			}
		}
		return nil
	}
	rt, _ := urlRuntime(t, srv.URL(), prefix, "A", agent, hook,
		signals.WithLeaseTTL(2*time.Second), signals.WithRecoveryInterval(200*time.Millisecond), signals.WithLinger(20*time.Millisecond))
	look, err := redisstreams.NewURL(ctx, srv.URL(), redisstreams.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer look.Close()
	if _, err := rt.Send(ctx, thread, signals.Signal{ID: "hang", Type: "t"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the first run did not start")
	}
	for _, id := range []string{"q1", "q2"} {
		if _, err := rt.Send(ctx, thread, signals.Signal{ID: id, Type: "t"}); err != nil {
			t.Fatal(err)
		}
	}
	hook.on.Store(true)
	if res, err := rt.Cancel(ctx, thread, "stop", signals.DropQueued()); err != nil || !res.Cancelled {
		t.Fatalf("Cancel = %+v, %v; want the running run cancelled", res, err)
	}
	// The mark, the inbox's last entry, goes before the owner reads it.
	inbox := prefix + ":{" + signals.InboxTopic(thread) + "}"
	last, err := c.XRevRangeN(ctx, inbox, "+", "-", 1).Result()
	if err != nil || len(last) != 1 {
		t.Fatalf("inbox's last entry: %v, %v", last, err)
	}
	if err := c.XDel(ctx, inbox, last[0].ID).Err(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(15 * time.Second); ; {
		owner, err := look.GetLeaseOwner(ctx, signals.LeaseKey(thread))
		if err != nil {
			t.Fatal(err)
		}
		if owner == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the thread is still held by %s 15s after its drop's mark was deleted", owner)
		}
		time.Sleep(20 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if ran["q1"] != 0 || ran["q2"] != 0 {
		t.Errorf("queued signals ran: %v", ran)
	}
}
