package signals_test

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

	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

// loseAcquires is a go-redis hook that, while armed, "loses the reply" of
// every lease acquire of one thread for one owner (the first "A/" owner it
// sees for that thread): the call fails at once with an error that leaves
// its outcome unknown, and its arguments are kept so that the test can run
// the very same command on the server later (a late acquire, as after a
// black hole heals: each connection's packets come in when its own TCP
// retransmission fires).
type loseAcquires struct {
	thread string
	// slow, when set, makes an acquire for that owner answer only after
	// 300ms (its ctx ending first fails it, as a slow server would).
	slow atomic.Value
	// slowOthers delays (then sends) the other "A/" acquires of the thread.
	slowOthers atomic.Bool
	armed      atomic.Bool
	mu         sync.Mutex
	owner      string
	lost       [][]any
}

var errLostReply = errors.New("injected: reply lost (i/o timeout)")

func (h *loseAcquires) match(cmd redis.Cmder) bool {
	if !h.armed.Load() {
		return false
	}
	args := cmd.Args()
	if len(args) < 8 || !strings.EqualFold(fmt.Sprint(args[0]), "evalsha") && !strings.EqualFold(fmt.Sprint(args[0]), "eval") {
		return false
	}
	key, _ := args[3].(string)
	owner, _ := args[7].(string)
	if !strings.HasSuffix(key, h.thread) && !strings.Contains(key, h.thread) || !strings.HasPrefix(owner, "A/") {
		return false
	}
	if !strings.Contains(key, "lease") {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.owner == "" {
		h.owner = owner
	}
	if owner != h.owner {
		return false
	}
	h.lost = append(h.lost, append([]any(nil), args...))
	return true
}

func (h *loseAcquires) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *loseAcquires) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if o, _ := h.slow.Load().(string); o != "" && len(cmd.Args()) >= 8 && cmd.Args()[7] == o {
			select {
			case <-ctx.Done():
				cmd.SetErr(ctx.Err())
				return ctx.Err()
			case <-time.After(300 * time.Millisecond):
			}
		}
		if h.slowOthers.Load() && len(cmd.Args()) >= 8 {
			k, _ := cmd.Args()[3].(string)
			o, _ := cmd.Args()[7].(string)
			own, _ := h.snapshot()
			if strings.Contains(k, h.thread) && strings.HasPrefix(o, "A/") && o != own {
				time.Sleep(400 * time.Millisecond)
			}
		}
		if h.match(cmd) {
			if h.first() {
				// The Send's own acquire: held until its ctx ends, so
				// that the Send stores nothing.
				select {
				case <-ctx.Done():
				case <-time.After(400 * time.Millisecond):
				}
			}
			cmd.SetErr(errLostReply)
			return errLostReply
		}
		return next(ctx, cmd)
	}
}

func (h *loseAcquires) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		var rest []redis.Cmder
		for _, c := range cmds {
			if h.match(c) {
				c.SetErr(errLostReply)
			} else {
				rest = append(rest, c)
			}
		}
		if len(rest) == 0 {
			return errLostReply
		}
		return next(ctx, rest)
	}
}

func (h *loseAcquires) first() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.lost) == 1
}

func (h *loseAcquires) snapshot() (string, [][]any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.owner, append([][]any(nil), h.lost...)
}

type runCounter struct {
	mu  sync.Mutex
	ran map[string]int
}

func (c *runCounter) agent(ctx context.Context, r *signals.Run) error {
	for _, s := range r.Signals {
		c.add(s.ID)
	}
	for {
		s, ok := r.Next(ctx)
		if !ok {
			return nil
		}
		c.add(s.ID)
	}
}

func (c *runCounter) add(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ran == nil {
		c.ran = map[string]int{}
	}
	c.ran[id]++
}

func (c *runCounter) of(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ran[id]
}

// settleOver waits until rt noted the lost acquire of thread (its settle
// began) and then for the settle's TTL, after which it has given up.
func settleOver(t *testing.T, rt *signals.Runtime, thread string, ttl time.Duration) {
	t.Helper()
	if !revWaitFor(t, "the settle began", 2*ttl, func() bool { return signals.GivenUp(rt, thread) >= 1 }) {
		t.FailNow()
	}
	time.Sleep(ttl + 500*time.Millisecond)
}

func revWaitFor(t *testing.T, what string, d time.Duration, cond func() bool) bool {
	t.Helper()
	end := time.Now().Add(d)
	for !cond() {
		if time.Now().After(end) {
			t.Errorf("%s: not within %v", what, d)
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

// TestLateStragglerAfterTakeover: an acquire of unknown outcome is not one
// command but several for the same owner (a Send's, then each of the
// settle's tries), which Redis may run at different times after a stall.
// The first copy leases the thread to the dead run, a peer's Send is
// forwarded to it and A takes it over; the takeover's tenure releases; then
// another copy leases the thread to that run again. A must take it over
// again: the peer's and A's own signals run within 1.5s (the TTL is 3s),
// each once, and A's Send is not Forwarded to its own dead run. Review revN
// (helper 19): the owner was forgotten at the first takeover, and s3, s4
// ran after the whole TTL (3.02s).
func TestLateStragglerAfterTakeover(t *testing.T) {
	srv, rc := startRedis(t)
	ctx := context.Background()
	const ttl = 3 * time.Second
	const th = "strag-thread"
	var rcA, rcB runCounter
	hook := &loseAcquires{thread: th}
	opts := []signals.Option{signals.WithLeaseTTL(ttl), signals.WithRecoveryInterval(300 * time.Millisecond), signals.WithLinger(100 * time.Millisecond)}
	a, _ := urlRuntime(t, srv.URL(), "strag", "A", rcA.agent, hook, opts...)
	b, _ := urlRuntime(t, srv.URL(), "strag", "B", rcB.agent, nil, opts...)
	ran := func(id string) int { return rcA.of(id) + rcB.of(id) }
	for i, rt := range []*signals.Runtime{a, b} {
		id := fmt.Sprint("warm-", i)
		if _, err := rt.Send(ctx, id, signals.Signal{ID: id, Type: "t"}); err != nil {
			t.Fatal(err)
		}
		revWaitFor(t, "warm "+id, 5*time.Second, func() bool { return ran(id) > 0 })
	}
	look, err := redisstreams.NewURL(ctx, srv.URL(), redisstreams.Options{Prefix: "strag"})
	if err != nil {
		t.Fatal(err)
	}
	defer look.Close()
	ownerOf := func() string {
		o, err := look.GetLeaseOwner(ctx, signals.LeaseKey(th))
		if err != nil {
			t.Fatal(err)
		}
		return o
	}

	hook.armed.Store(true)
	sctx, scancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err = a.Send(sctx, th, signals.Signal{ID: "s1", Type: "t"})
	scancel()
	t.Logf("Send s1 with its acquire's reply lost: %v", err)
	// The settle tries for a TTL (each try's reply lost too), then gives up.
	settleOver(t, a, th, ttl)
	hook.armed.Store(false)
	owner, lost := hook.snapshot()
	t.Logf("owner %s: %d acquires with unknown outcome (Send's + settle's tries)", owner, len(lost))
	if len(lost) < 2 {
		t.Fatalf("premise: want the Send's acquire and at least one settle try, got %d", len(lost))
	}
	revWaitFor(t, "thread free after s1", 3*ttl, func() bool { return ownerOf() == "" })

	// The first copy arrives: the thread is leased to the dead run.
	if err := rc.Do(ctx, lost[0]...).Err(); err != nil {
		t.Fatal(err)
	}
	if o := ownerOf(); o != owner {
		t.Fatalf("premise: after the late acquire the owner is %q", o)
	}
	// A peer's Send is forwarded to it; A adopts and runs s2, then the
	// adopted tenure releases.
	if _, err := b.Send(ctx, th, signals.Signal{ID: "s2", Type: "t"}); err != nil {
		t.Fatal(err)
	}
	revWaitFor(t, "s2 ran (adopted)", time.Second, func() bool { return ran("s2") > 0 })
	revWaitFor(t, "adopted tenure released", 3*ttl, func() bool { return ownerOf() == "" })
	t.Logf("after the takeover, given-up entries remembered: %d", signals.GivenUp(a, th))

	// A second copy for the same owner (a settle try) arrives now.
	if err := rc.Do(ctx, lost[len(lost)-1]...).Err(); err != nil {
		t.Fatal(err)
	}
	if o := ownerOf(); o != owner {
		t.Fatalf("premise: after the straggler the owner is %q", o)
	}
	start := time.Now()
	if _, err := b.Send(ctx, th, signals.Signal{ID: "s3", Type: "t"}); err != nil {
		t.Fatal(err)
	}
	acc, err := a.Send(ctx, th, signals.Signal{ID: "s4", Type: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if acc.Action == signals.Forwarded && acc.Owner == owner {
		t.Errorf("Send from A: Forwarded to %s, A's own dead run (forgotten at the takeover)", acc.Owner)
	}
	ok := revWaitFor(t, "s3 and s4 ran", 1500*time.Millisecond, func() bool { return ran("s3") > 0 && ran("s4") > 0 })
	if !ok {
		revWaitFor(t, "s3 and s4 ran at all", 3*ttl, func() bool { return ran("s3") > 0 && ran("s4") > 0 })
		t.Logf("s3, s4 ran after %v (lease TTL %v)", time.Since(start).Round(time.Millisecond), ttl)
	}
	for _, id := range []string{"s2", "s3", "s4"} {
		if k := ran(id); k != 1 {
			t.Errorf("signal %s ran %d times", id, k)
		}
	}
}

// TestCloseReleasesLateLeases: a late acquire leased a thread to a dead run
// of A, and A closes: Close releases the leases of the runs it remembers
// (givenup.go), so a peer's signal runs within 1.5s (TTL 3s). Review revN:
// after 3.01s, the whole TTL, before Close did so.
func TestCloseReleasesLateLeases(t *testing.T) {
	srv, rc := startRedis(t)
	ctx := context.Background()
	const ttl = 3 * time.Second
	const th = "closelate-thread"
	var rcA, rcB runCounter
	hook := &loseAcquires{thread: th}
	opts := []signals.Option{signals.WithLeaseTTL(ttl), signals.WithRecoveryInterval(300 * time.Millisecond), signals.WithLinger(100 * time.Millisecond)}
	a, stopA := urlRuntime(t, srv.URL(), "closelate", "A", rcA.agent, hook, opts...)
	b, _ := urlRuntime(t, srv.URL(), "closelate", "B", rcB.agent, nil, opts...)
	ran := func(id string) int { return rcA.of(id) + rcB.of(id) }
	for i, rt := range []*signals.Runtime{a, b} {
		id := fmt.Sprint("warm-", i)
		if _, err := rt.Send(ctx, id, signals.Signal{ID: id, Type: "t"}); err != nil {
			t.Fatal(err)
		}
		revWaitFor(t, "warm "+id, 5*time.Second, func() bool { return ran(id) > 0 })
	}
	look, err := redisstreams.NewURL(ctx, srv.URL(), redisstreams.Options{Prefix: "closelate"})
	if err != nil {
		t.Fatal(err)
	}
	defer look.Close()
	ownerOf := func() string {
		o, err := look.GetLeaseOwner(ctx, signals.LeaseKey(th))
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	hook.armed.Store(true)
	sctx, scancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, _ = a.Send(sctx, th, signals.Signal{ID: "s1", Type: "t"})
	scancel()
	settleOver(t, a, th, ttl)
	hook.armed.Store(false)
	owner, lost := hook.snapshot()
	if err := rc.Do(ctx, lost[0]...).Err(); err != nil {
		t.Fatal(err)
	}
	if o := ownerOf(); o != owner {
		t.Fatalf("premise: owner %q", o)
	}
	stopA() // A closes, remembering owner as a given-up run of this thread
	t.Logf("after A's Close the thread's owner is %q", ownerOf())
	start := time.Now()
	if _, err := b.Send(ctx, th, signals.Signal{ID: "s2", Type: "t"}); err != nil {
		t.Fatal(err)
	}
	if !revWaitFor(t, "s2 ran on B", 1500*time.Millisecond, func() bool { return ran("s2") > 0 }) {
		revWaitFor(t, "s2 ran at all", 3*ttl, func() bool { return ran("s2") > 0 })
		t.Logf("s2 ran after %v (lease TTL %v)", time.Since(start).Round(time.Millisecond), ttl)
	}
}

// TestSendToRevokedLateLease: an operator revokes (not forced) the lease a
// late acquire gave a dead run of A (a revoked key stays with its owner
// until the owner releases it or it expires). A's Sends succeed, and they
// and a peer's run within 1.5s (TTL 3s), each once: A releases the revoked
// lease of its run that never started and takes the thread for a new run.
// Review revN: A's Sends returned an error, and the signals ran only after
// the TTL (3.01s).
func TestSendToRevokedLateLease(t *testing.T) {
	srv, rc := startRedis(t)
	ctx := context.Background()
	const ttl = 3 * time.Second
	const th = "revoked-thread"
	var rcA, rcB runCounter
	hook := &loseAcquires{thread: th}
	opts := []signals.Option{signals.WithLeaseTTL(ttl), signals.WithRecoveryInterval(300 * time.Millisecond), signals.WithLinger(100 * time.Millisecond)}
	a, _ := urlRuntime(t, srv.URL(), "revoked", "A", rcA.agent, hook, opts...)
	b, _ := urlRuntime(t, srv.URL(), "revoked", "B", rcB.agent, nil, opts...)
	ran := func(id string) int { return rcA.of(id) + rcB.of(id) }
	for i, rt := range []*signals.Runtime{a, b} {
		id := fmt.Sprint("warm-", i)
		if _, err := rt.Send(ctx, id, signals.Signal{ID: id, Type: "t"}); err != nil {
			t.Fatal(err)
		}
		revWaitFor(t, "warm "+id, 5*time.Second, func() bool { return ran(id) > 0 })
	}
	look, err := redisstreams.NewURL(ctx, srv.URL(), redisstreams.Options{Prefix: "revoked"})
	if err != nil {
		t.Fatal(err)
	}
	defer look.Close()
	hook.armed.Store(true)
	sctx, scancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, _ = a.Send(sctx, th, signals.Signal{ID: "s1", Type: "t"})
	scancel()
	settleOver(t, a, th, ttl)
	hook.armed.Store(false)
	owner, lost := hook.snapshot()
	if err := rc.Do(ctx, lost[0]...).Err(); err != nil {
		t.Fatal(err)
	}
	if err := look.RevokeLease(ctx, signals.LeaseKey(th), "stuck on a dead run"); err != nil {
		t.Fatal(err)
	}
	accB, errB := b.Send(ctx, th, signals.Signal{ID: "s2", Type: "t"})
	t.Logf("peer B's Send: %+v, %v", accB, errB)
	for i := range 3 {
		id := fmt.Sprint("a", i)
		acc, err := a.Send(ctx, th, signals.Signal{ID: id, Type: "t"})
		if err != nil {
			t.Errorf("A's Send %s to a thread whose late lease (%s) was revoked: %v", id, owner, err)
		} else {
			t.Logf("A's Send %s: %+v", id, acc)
		}
	}
	start := time.Now()
	for _, id := range []string{"s2", "a0", "a1", "a2"} {
		if !revWaitFor(t, "ran "+id, 1500*time.Millisecond, func() bool { return ran(id) > 0 }) {
			revWaitFor(t, "ran "+id+" at all", 4*ttl, func() bool { return ran(id) > 0 })
		}
	}
	t.Logf("s2, a0-a2 ran %v after the Sends (TTL %v)", time.Since(start).Round(time.Millisecond), ttl)
	time.Sleep(200 * time.Millisecond)
	for _, id := range []string{"s2", "a0", "a1", "a2"} {
		if k := ran(id); k != 1 {
			t.Errorf("signal %s ran %d times, want once", id, k)
		}
	}
}

// TestShortSendToLateLease: a Send from A to a thread leased to a dead run
// of A takes the thread over (a second acquire, after the one that found
// it held) within its own ctx. When that second acquire is slow and the
// ctx ends first, the Send returns "not stored (retry it)" (before the
// takeover it returned Forwarded after one acquire): the retry with the
// same signal succeeds, and the signal runs once.
func TestShortSendToLateLease(t *testing.T) {
	srv, rc := startRedis(t)
	ctx := context.Background()
	const ttl = 3 * time.Second
	const th = "short-thread"
	var rcA, rcB runCounter
	hook := &loseAcquires{thread: th}
	opts := []signals.Option{signals.WithLeaseTTL(ttl), signals.WithRecoveryInterval(300 * time.Millisecond), signals.WithLinger(100 * time.Millisecond)}
	a, _ := urlRuntime(t, srv.URL(), "short", "A", rcA.agent, hook, opts...)
	ran := func(id string) int { return rcA.of(id) + rcB.of(id) }
	id := "warm"
	if _, err := a.Send(ctx, id, signals.Signal{ID: id, Type: "t"}); err != nil {
		t.Fatal(err)
	}
	revWaitFor(t, "warm", 5*time.Second, func() bool { return ran(id) > 0 })
	hook.armed.Store(true)
	sctx, scancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, _ = a.Send(sctx, th, signals.Signal{ID: "s1", Type: "t"})
	scancel()
	settleOver(t, a, th, ttl)
	hook.armed.Store(false)
	owner, lost := hook.snapshot()
	if err := rc.Do(ctx, lost[0]...).Err(); err != nil {
		t.Fatal(err)
	}
	hook.slow.Store(owner) // the takeover's acquire is slow
	sctx, scancel = context.WithTimeout(ctx, 200*time.Millisecond)
	acc, err := a.Send(sctx, th, signals.Signal{ID: "s2", Type: "t"})
	scancel()
	hook.slow.Store("")
	t.Logf("Send with a 200ms ctx, the takeover's acquire slow: %+v, %v", acc, err)
	if err != nil {
		if !strings.Contains(err.Error(), "not stored (retry it)") {
			t.Fatalf("Send: %v; want nil or a 'not stored (retry it)' error", err)
		}
		// Retried with the same signal: stored and run, once.
		if acc, err = a.Send(ctx, th, signals.Signal{ID: "s2", Type: "t"}); err != nil {
			t.Fatalf("retry: %v", err)
		}
	}
	revWaitFor(t, "s2 ran", 1500*time.Millisecond, func() bool { return ran("s2") > 0 })
	time.Sleep(200 * time.Millisecond)
	if k := ran("s2"); k != 1 {
		t.Errorf("s2 ran %d times, want once", k)
	}
}

// TestCloseRacesAdoptLate: a peer's Sends forwarded to a dead run A
// remembers (each an adoptLate on A's fan-out watch) while A closes: no
// panic, no race, Close returns, and the signals all run once (review revN).
func TestCloseRacesAdoptLate(t *testing.T) {
	srv, rc := startRedis(t)
	ctx := context.Background()
	const ttl = 2 * time.Second
	const th = "closerace-thread"
	var rcA, rcB runCounter
	hook := &loseAcquires{thread: th}
	opts := []signals.Option{signals.WithLeaseTTL(ttl), signals.WithRecoveryInterval(200 * time.Millisecond), signals.WithLinger(50 * time.Millisecond)}
	a, _ := urlRuntime(t, srv.URL(), "closerace", "A", rcA.agent, hook, opts...)
	b, _ := urlRuntime(t, srv.URL(), "closerace", "B", rcB.agent, nil, opts...)
	ran := func(id string) int { return rcA.of(id) + rcB.of(id) }
	for i, rt := range []*signals.Runtime{a, b} {
		id := fmt.Sprint("warm-", i)
		if _, err := rt.Send(ctx, id, signals.Signal{ID: id, Type: "t"}); err != nil {
			t.Fatal(err)
		}
		revWaitFor(t, "warm "+id, 5*time.Second, func() bool { return ran(id) > 0 })
	}
	hook.armed.Store(true)
	sctx, scancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, _ = a.Send(sctx, th, signals.Signal{ID: "s1", Type: "t"})
	scancel()
	settleOver(t, a, th, ttl)
	hook.armed.Store(false)
	_, lost := hook.snapshot()
	if err := rc.Do(ctx, lost[0]...).Err(); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var ids []string
	for i := range 40 {
		id := fmt.Sprint("p", i)
		ids = append(ids, id)
		wg.Go(func() {
			if _, err := b.Send(ctx, th, signals.Signal{ID: id, Type: "t"}); err != nil {
				t.Error(err)
			}
		})
		if i == 5 {
			wg.Go(func() {
				cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				defer cancel()
				start := time.Now()
				if err := a.Close(cctx); err != nil {
					t.Errorf("A Close: %v", err)
				}
				t.Logf("A closed in %v", time.Since(start).Round(time.Millisecond))
			})
		}
	}
	wg.Wait()
	start := time.Now()
	for _, id := range ids {
		revWaitFor(t, "ran "+id, 4*ttl, func() bool { return ran(id) > 0 })
	}
	t.Logf("all ran %v after the sends", time.Since(start).Round(time.Millisecond))
	time.Sleep(300 * time.Millisecond)
	for _, id := range ids {
		if k := ran(id); k != 1 {
			t.Errorf("%s ran %d times", id, k)
		}
	}
}

// TestSameProcessIDNoForeignTakeover: A1 and A2 share WithProcessID "A". A
// late acquire leases the thread to a run of A1 that never started. A2's
// Send must not take that lease over (it is not A2's run): it is Forwarded
// to it, and A1 takes it over on seeing the notice; the signal runs once,
// on A1 (review revN).
func TestSameProcessIDNoForeignTakeover(t *testing.T) {
	srv, rc := startRedis(t)
	ctx := context.Background()
	const ttl = 3 * time.Second
	const th = "sameid-thread"
	var rc1, rc2 runCounter
	hook := &loseAcquires{thread: th}
	opts := []signals.Option{signals.WithLeaseTTL(ttl), signals.WithRecoveryInterval(300 * time.Millisecond), signals.WithLinger(100 * time.Millisecond)}
	a1, _ := urlRuntime(t, srv.URL(), "sameid", "A", rc1.agent, hook, opts...)
	a2, _ := urlRuntime(t, srv.URL(), "sameid", "A", rc2.agent, nil, opts...)
	ran := func(id string) int { return rc1.of(id) + rc2.of(id) }
	for i, rt := range []*signals.Runtime{a1, a2} {
		id := fmt.Sprint("warm-", i)
		if _, err := rt.Send(ctx, id, signals.Signal{ID: id, Type: "t"}); err != nil {
			t.Fatal(err)
		}
		revWaitFor(t, "warm "+id, 5*time.Second, func() bool { return ran(id) > 0 })
	}
	hook.armed.Store(true)
	sctx, scancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, _ = a1.Send(sctx, th, signals.Signal{ID: "s1", Type: "t"})
	scancel()
	settleOver(t, a1, th, ttl)
	hook.armed.Store(false)
	owner, lost := hook.snapshot()
	if err := rc.Do(ctx, lost[0]...).Err(); err != nil {
		t.Fatal(err)
	}
	acc, err := a2.Send(ctx, th, signals.Signal{ID: "s2", Type: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if acc.Action != signals.Forwarded || acc.Owner != owner {
		t.Errorf("A2's Send: %+v, want Forwarded to A1's run %s", acc, owner)
	}
	revWaitFor(t, "s2 ran", time.Second, func() bool { return ran("s2") > 0 })
	time.Sleep(200 * time.Millisecond)
	if rc1.of("s2") != 1 || rc2.of("s2") != 0 {
		t.Errorf("s2 ran %d times on A1, %d on A2; want once on A1", rc1.of("s2"), rc2.of("s2"))
	}
}

// TestSettleTakesItsOwnLateLease: while the settle of A's lost acquire
// (owner O) still runs, the acquire runs late and leases the thread to O,
// and a Send of A to the thread finds it held by O. The Send takes the
// thread over for O (the owner is remembered from the moment the outcome
// was unknown) and is not Forwarded to it, and its signal runs within 1.5s.
// Review revN: the settle, handed that Send's result ("held by O"), took
// it for another owner's and gave up, and the Send returned Forwarded to
// O, A's own run that never started.
func TestSettleTakesItsOwnLateLease(t *testing.T) {
	srv, rc := startRedis(t)
	ctx := context.Background()
	const ttl = 4 * time.Second
	const th = "settlewin-thread"
	var rcA runCounter
	hook := &loseAcquires{thread: th}
	opts := []signals.Option{signals.WithLeaseTTL(ttl), signals.WithRecoveryInterval(300 * time.Millisecond), signals.WithLinger(100 * time.Millisecond)}
	a, _ := urlRuntime(t, srv.URL(), "settlewin", "A", rcA.agent, hook, opts...)
	if _, err := a.Send(ctx, "warm", signals.Signal{ID: "warm", Type: "t"}); err != nil {
		t.Fatal(err)
	}
	revWaitFor(t, "warm", 5*time.Second, func() bool { return rcA.of("warm") > 0 })
	hook.armed.Store(true)
	sctx, scancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, _ = a.Send(sctx, th, signals.Signal{ID: "s1", Type: "t"})
	scancel()
	time.Sleep(500 * time.Millisecond) // the settle runs, its tries lost
	hook.armed.Store(false)
	owner, lost := hook.snapshot()
	if err := rc.Do(ctx, lost[0]...).Err(); err != nil {
		t.Fatal(err)
	}
	hook.slowOthers.Store(true)
	start := time.Now()
	acc, err := a.Send(ctx, th, signals.Signal{ID: "s2", Type: "t"})
	hook.slowOthers.Store(false)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Send during the settle: %+v after %v; given-up entries now %d", acc, time.Since(start).Round(time.Millisecond), signals.GivenUp(a, th))
	if acc.Action == signals.Forwarded && acc.Owner == owner {
		t.Errorf("Send from A: Forwarded to %s, A's own run that never started (its settle still ran)", owner)
	}
	if !revWaitFor(t, "s2 ran", 1500*time.Millisecond, func() bool { return rcA.of("s2") > 0 }) {
		revWaitFor(t, "s2 ran at all", 3*ttl, func() bool { return rcA.of("s2") > 0 })
		t.Logf("s2 ran after %v", time.Since(start).Round(time.Millisecond))
	}
}
