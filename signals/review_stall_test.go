package signals_test

// Found by review revC (helper 14, 2026-11-27): claims of signals/doc.go and
// Runtime.Close's doc checked against a real redis-server, on
// redisstreams.NewURL clients with go-redis's default pool and timeouts.

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

// TestCloseOnStalledServerLapseTries: Runtime.Close's doc says that
// when its ctx ends, "its teardown (releases, hand-backs) may then take
// closeGrace (1s) after the last run returned and no longer, so on a server
// that stopped answering it returns about a second after the runs did".
// The stalled-server Close tests run one runtime, which holds every thread
// itself, so its lapse watch (signals/lapse.go) has nothing to try. Here
// runtime B (defaults: TTL 15s, recovery 1s) runs no agent at all: runtime
// A (another NewURL Backend, as another process would) holds 100 threads
// in long runs with a signal queued behind each, so B's notice handlers
// find them held and note when each lease lapses. The server stops
// (SIGSTOP). No notice comes back to push B's entries later, so they come
// due within a TTL, and B's lapse watch tries them, 16 at a time
// (lapseTries): each try's first call is GroupBacklog. B is closed with a
// 1s ctx 200ms after those tries began. B has no run, so Close must return
// within about 2s (1s ctx + closeGrace); 2.6s is allowed. Before
// GroupBacklog returned at its ctx's end it waited for go-redis's
// ReadTimeout (5s) whatever its ctx, and Close took 4.78-4.85s (7 of 7);
// now 2.0s. (The stalled-server Close tests allow 5s and run one runtime,
// which holds every thread itself, so they did not see it.)
func TestCloseOnStalledServerLapseTries(t *testing.T) {
	t.Parallel() // waits on a stalled server or a TTL, hardly any CPU: beside the others (CI time)
	srv, _ := startRedis(t)
	ctx := context.Background()
	newB := func() *redisstreams.Backend {
		b, err := redisstreams.NewURL(ctx, srv.URL(), redisstreams.Options{Prefix: "rvlapse"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		return b
	}
	bA, bB := newB(), newB()
	hold := func(ctx context.Context, run *signals.Run) error { <-ctx.Done(); return nil }
	rtA, err := signals.New(bA, hold, signals.WithProcessID("A"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_ = rtA.Close(c)
	})
	rtB, err := signals.New(bB, hold, signals.WithProcessID("B"))
	if err != nil {
		t.Fatal(err)
	}
	const threads = 100
	for i := range threads {
		for j := range 2 {
			acc, err := rtA.Send(ctx, fmt.Sprint("t", i), signals.Signal{ID: fmt.Sprint("s", i, "-", j), Type: "msg"})
			if err != nil {
				t.Fatal(err)
			}
			if acc.Action == signals.Forwarded {
				t.Fatalf("send %d/%d forwarded to %s: B holds a thread", i, j, acc.Owner)
			}
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for signals.LapseEntries(rtB) < threads/3 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	var stallAt, closeAt time.Time
	var slowOnce sync.Once
	xc := &pauseBeforeXInfo{slow: func(d time.Duration, ctxErr error, start time.Time) {
		slowOnce.Do(func() {
			t.Logf("the first of B's slow backlog reads started %v after the stall took %v (ctx: %v), returned %v after Close began",
				start.Sub(stallAt).Round(time.Millisecond), d.Round(time.Millisecond), ctxErr, time.Since(closeAt).Round(time.Millisecond))
		})
	}}
	bB.Client().AddHook(xc)
	time.Sleep(12 * time.Second)
	t.Logf("B's lapse watch holds %d of %d threads", signals.LapseEntries(rtB), threads)
	if signals.LapseEntries(rtB) == 0 {
		t.Fatal("B's lapse watch holds no thread; the scenario did not form")
	}

	srv.Pause(t)
	stallAt = time.Now()
	t.Cleanup(func() { srv.Resume(t) })
	// B's entries come due within a TTL of the stop (A renewed its leases
	// in one batch, so they come due together), and each try's backlog
	// read on the stopped server waits for go-redis's ReadTimeout (5s). The
	// service is shut down while such tries are in flight: 200ms after
	// they began.
	before := xc.n.Load()
	deadline = time.Now().Add(20 * time.Second)
	for xc.n.Load() == before && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if xc.n.Load() == before {
		t.Fatal("B's lapse watch tried no thread in 20s of the stall")
	}
	time.Sleep(200 * time.Millisecond)
	t.Logf("%v into the stall, %d backlog reads in flight or done since it began", time.Since(stallAt).Round(time.Millisecond), xc.n.Load()-before)
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	diag := time.AfterFunc(2600*time.Millisecond, func() { logStuckLeasebus(t, "2.6s into Close") })
	defer diag.Stop()
	start := time.Now()
	closeAt = start
	err = rtB.Close(cctx)
	d := time.Since(start)
	t.Logf("B.Close(ctx 1s), no run in B, lapse tries in flight: %v after %v", err, d.Round(time.Millisecond))
	if d > 2600*time.Millisecond {
		t.Errorf("Close(ctx 1s) of a runtime with no run took %v on a stopped server; its doc promises ctx + closeGrace (1s) \"and no longer\"", d.Round(time.Millisecond))
	}
	srv.Resume(t)
}

// TestStatusReturnsAtCancelOnStalledServer: Controller.Status (and
// Runtime.Status, and Controller.List, which calls it per thread) reads the
// lease (InspectLease) and then the inbox group's backlog (GroupBacklog),
// both of which return when their ctx ends (redisstreams/doc.go), so
// Status does too (its doc). The server stops between the two (a hook on
// the NewURL client pauses it just before the XINFO pipeline, as a server
// that stops while Status or List is in flight may); ctx is cancelled
// 200ms later. Before GroupBacklog returned at its ctx's end: 4.80s after
// the cancel (4 of 4), with a bare i/o timeout; now at the cancel.
func TestStatusReturnsAtCancelOnStalledServer(t *testing.T) {
	srv, _ := startRedis(t)
	ctx := context.Background()
	b, err := redisstreams.NewURL(ctx, srv.URL(), redisstreams.Options{Prefix: "rvstatus"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	hold := func(ctx context.Context, run *signals.Run) error { <-ctx.Done(); return nil }
	rt, err := signals.New(b, hold)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_ = rt.Close(c)
	})
	for j := range 3 {
		if _, err := rt.Send(ctx, "th", signals.Signal{ID: fmt.Sprint("s", j), Type: "msg"}); err != nil {
			t.Fatal(err)
		}
	}
	cb, err := redisstreams.NewURL(ctx, srv.URL(), redisstreams.Options{Prefix: "rvstatus"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cb.Close() })
	c, err := signals.NewController(ctx, cb)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { go c.Close() })
	st, err := c.Status(ctx, "th")
	if err != nil || st.Owner == "" {
		t.Fatalf("Status before the stall: %+v, %v", st, err)
	}
	t.Logf("before the stall: owner %s, queued %d, in flight %d", st.Owner, st.Queued, st.InFlight)

	h := &pauseBeforeXInfo{pause: func() { srv.Pause(t) }}
	cb.Client().AddHook(h)
	t.Cleanup(func() { srv.Resume(t) })
	h.armed.Store(true)
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var cancelled time.Time
	time.AfterFunc(200*time.Millisecond, func() { cancelled = time.Now(); cancel() })
	start := time.Now()
	_, err = c.Status(sctx, "th")
	end := time.Now()
	if !h.fired.Load() {
		t.Fatalf("the server was not paused before the backlog read (err %v)", err)
	}
	late := end.Sub(cancelled)
	t.Logf("Status on a server stopped before its backlog read, ctx cancelled at 200ms: returned after %v (%v after the cancel): %v",
		end.Sub(start).Round(time.Millisecond), late.Round(time.Millisecond), err)
	if late > time.Second {
		t.Errorf("Status returned %v after its ctx was cancelled on a stopped server, want within 1s", late.Round(time.Millisecond))
	}
}

// pauseBeforeXInfo is a go-redis hook that, once armed, pauses the server
// right before the first pipeline holding an XINFO goes out.
type pauseBeforeXInfo struct {
	armed, fired atomic.Bool
	pause        func()
	n            atomic.Int64
	slow         func(d time.Duration, ctxErr error, start time.Time)
}

func (h *pauseBeforeXInfo) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *pauseBeforeXInfo) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h *pauseBeforeXInfo) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 && strings.EqualFold(cmds[0].Name(), "xinfo") {
			h.n.Add(1)
			if h.slow != nil {
				start := time.Now()
				defer func() {
					if d := time.Since(start); d > time.Second {
						h.slow(d, ctx.Err(), start)
					}
				}()
			}
		}
		if h.armed.Load() && !h.fired.Load() && len(cmds) > 0 && strings.EqualFold(cmds[0].Name(), "xinfo") && h.pause != nil {
			h.fired.Store(true)
			h.pause()
		}
		return next(ctx, cmds)
	}
}

// logStuckLeasebus logs the leasebus goroutines alive now, grouped by their
// first leasebus frames.
func logStuckLeasebus(t *testing.T, when string) {
	buf := make([]byte, 8<<20)
	buf = buf[:runtime.Stack(buf, true)]
	counts := map[string]int{}
	for _, g := range strings.Split(string(buf), "\n\n") {
		var frames []string
		for _, l := range strings.Split(g, "\n") {
			if strings.HasPrefix(l, "github.com/leasebus/leasebus/") && !strings.Contains(l, "_test") {
				frames = append(frames, l[len("github.com/leasebus/leasebus/"):])
				if len(frames) == 6 {
					break
				}
			}
		}
		if len(frames) > 0 && strings.Contains(g, "go-redis") {
			counts[strings.Join(frames, " < ")]++
		}
	}
	for k, n := range counts {
		t.Logf("%s: %d goroutine(s) in go-redis at %s", when, n, k)
	}
}

// TestConcurrentCancelsOnStalledServer: Runtime.Cancel's doc (and
// Controller.Cancel's, which refers to it) says "Cancel fails closed: when
// the owner does not answer before ctx ends (or within
// DefaultControlTimeout when ctx has no deadline) it returns an error
// wrapping ErrUnreachable". A standalone Controller subscribes to the
// control topic at its first Cancel that asks another process. Two Cancels of a web handler's
// Controller race there while the server stops: the first (no deadline, so
// DefaultControlTimeout, 5s) is in its Subscribe when the server stops; the
// second, with a 300ms ctx, read the owner before the stop. The second
// must return within about its ctx (1s allowed).
func TestConcurrentCancelsOnStalledServer(t *testing.T) {
	t.Parallel() // waits on a stalled server or a TTL, hardly any CPU: beside the others (CI time)
	srv, _ := startRedis(t)
	ctx := context.Background()
	bA, err := redisstreams.NewURL(ctx, srv.URL(), redisstreams.Options{Prefix: "rvcancel"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bA.Close() })
	hold := func(ctx context.Context, run *signals.Run) error { <-ctx.Done(); return nil }
	rtA, err := signals.New(bA, hold, signals.WithProcessID("A"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_ = rtA.Close(c)
	})
	if _, err := rtA.Send(ctx, "th", signals.Signal{ID: "s0", Type: "msg"}); err != nil {
		t.Fatal(err)
	}
	cb, err := redisstreams.NewURL(ctx, srv.URL(), redisstreams.Options{Prefix: "rvcancel"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { go cb.Close() })
	c, err := signals.NewController(ctx, cb)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { go c.Close() })
	if st, err := c.Status(ctx, "th"); err != nil || st.Process != "A" {
		t.Fatalf("status before: %+v, %v", st, err)
	}
	h := &pauseAtSubscribe{pause: func() { srv.Pause(t) }}
	cb.Client().AddHook(h)
	t.Cleanup(func() { srv.Resume(t) })
	h.armed.Store(true)

	first := make(chan error, 1)
	go func() {
		_, err := c.Cancel(ctx, "th", "first") // no deadline: DefaultControlTimeout
		first <- err
	}()
	time.Sleep(20 * time.Millisecond) // the first is at its Subscribe, waiting for the second's owner read
	sctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = c.Cancel(sctx, "th", "second")
	d := time.Since(start)
	if !h.fired.Load() {
		t.Fatalf("the server was not stopped at the control subscription (second: %v)", err)
	}
	t.Logf("second Cancel (ctx 300ms) on a server stopped during the first's control subscription: %v after %v", err, d.Round(time.Millisecond))
	ferr := <-first
	t.Logf("first Cancel (no deadline): %v after %v", ferr, time.Since(start).Round(time.Millisecond))
	if d > time.Second {
		t.Errorf("Cancel with a 300ms ctx returned after %v; its doc: it returns ErrUnreachable when the owner does not answer before ctx ends", d.Round(time.Millisecond))
	}
	if !errors.Is(err, signals.ErrUnreachable) {
		t.Errorf("second Cancel: %v, want ErrUnreachable", err)
	}
}

// pauseAtSubscribe is a go-redis hook that, once armed, holds the first
// XINFO sent alone (a fan-out Subscribe's start id) until two other
// commands (the two Cancels' owner reads) went out, then stops the server
// and lets the XINFO go.
type pauseAtSubscribe struct {
	armed, fired atomic.Bool
	others       atomic.Int64
	pause        func()
}

func (h *pauseAtSubscribe) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *pauseAtSubscribe) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.armed.Load() && !h.fired.Load() {
			if strings.EqualFold(cmd.Name(), "xinfo") {
				h.fired.Store(true)
				for end := time.Now().Add(2 * time.Second); h.others.Load() < 2 && time.Now().Before(end); {
					time.Sleep(time.Millisecond)
				}
				time.Sleep(20 * time.Millisecond) // let the second's owner read come back
				h.pause()
			} else {
				h.others.Add(1)
			}
		}
		return next(ctx, cmd)
	}
}

func (h *pauseAtSubscribe) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.armed.Load() && !h.fired.Load() {
			h.others.Add(1)
		}
		return next(ctx, cmds)
	}
}
