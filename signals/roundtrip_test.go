package signals_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

// sendRoundTrips is the budget of Redis round trips on Send's fast path on
// a standalone server, per Action (Send's doc: the acquire, then the inbox
// entry and the wake notice in one pipeline; no acquire for Delivered).
var sendRoundTrips = map[signals.Action]int{signals.Woke: 2, signals.Delivered: 1, signals.Forwarded: 2}

// rtProbeKey is the context key under which a *rtProbe rides on Send's ctx.
type rtProbeKey struct{}

// rtTrip is one round trip attributed to a Send.
type rtTrip struct {
	desc  string // command names joined by "+"
	setup bool   // connection setup (HELLO, CLIENT SETINFO, ...) of a dial
}

func (r rtTrip) String() string {
	if r.setup {
		return "(" + r.desc + ")"
	}
	return r.desc
}

// rtProbe collects the round trips attributed to one Send call. It accepts
// them only while open, i.e. between Send's start and its return.
type rtProbe struct {
	mu    sync.Mutex
	open  bool
	trips []rtTrip
}

func (p *rtProbe) add(r rtTrip) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.open {
		return false
	}
	p.trips = append(p.trips, r)
	return true
}

func (p *rtProbe) close() []rtTrip {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.open = false
	return append([]rtTrip(nil), p.trips...)
}

// rtCommands returns the round trips in trips that are commands, leaving out
// connection setup.
func rtCommands(trips []rtTrip) []rtTrip {
	var out []rtTrip
	for _, r := range trips {
		if !r.setup {
			out = append(out, r)
		}
	}
	return out
}

// rtHook is a redis.Hook that counts round trips: one per ProcessHook call
// (a single command) and one per ProcessPipelineHook call (a pipeline or
// transaction, however many commands it carries). Dials are counted apart.
// When the pool has no idle connection, go-redis dials on the caller's
// goroutine and runs the connection handshake (HELLO, then a CLIENT SETINFO
// pipeline) through these hooks with the caller's ctx: those round trips are
// marked as setup. They are real latency on that call, but they are the
// pool's cost, not the fast path's, and are reported apart from the
// budget.
//
// Which round trips belong to Send. The runtime's background loops share the
// client with Send: the WorkTopic subscription (XREADGROUP on a dedicated
// connection, CLIENT UNBLOCK, XACK), its wake-notice handlers (GET of the
// done record, lease acquires when recovering), lease renewals, and, after
// Woke, the new tenure's inbox subscription. A plain before/after delta of a
// counter is therefore noisy: the notice Send publishes wakes the work
// subscription while Send is still running. So a round trip is attributed
// to the Send whose window is open when it is issued if
//
//   - its ctx carries that Send's probe: everything Send issues on its own
//     goroutine with its ctx (the lease acquire goes through
//     lease.Keeper.Keep with context.WithoutCancel(ctx), which keeps values),
//     or
//   - it is made of XADDs only (with any PEXPIRE): redisstreams batches
//     Publish calls through a writer goroutine that sends them with
//     context.Background(), so the inbox and notice publishes carry no probe.
//     Nothing in the runtime publishes except Send, and the tests below send
//     one signal at a time, so every XADD in the window is Send's.
//
// The background work that the Woke path starts asynchronously (the tenure's
// inbox subscription, done-record read, the run itself) is issued with
// context.Background() and no XADD, so it is not counted against Send; it is
// reported in the log as "other". Contexts derived from Send's ctx that
// outlive the call (the held lease's context keeps its values) are ignored
// once the probe is closed.
type rtHook struct {
	redistest.RoundTrips                         // counts; its Observe is count
	cur                  atomic.Pointer[rtProbe] // the Send window currently open, if any
	other                atomic.Int64            // round trips attributed to no Send
}

var _ redis.Hook = (*rtHook)(nil)

func newRTHook() *rtHook {
	h := &rtHook{}
	h.Observe = h.count
	return h
}

func (h *rtHook) count(ctx context.Context, cmds []redis.Cmder, _ bool) {
	names := make([]string, len(cmds))
	publishOnly, setup := len(cmds) > 0, len(cmds) > 0
	for i, c := range cmds {
		names[i] = strings.ToLower(c.Name())
		if names[i] != "xadd" && names[i] != "pexpire" {
			publishOnly = false
		}
		if !rtIsSetup(c) {
			setup = false
		}
	}
	r := rtTrip{desc: strings.Join(names, "+"), setup: setup}
	if p, ok := ctx.Value(rtProbeKey{}).(*rtProbe); ok && p.add(r) {
		return
	}
	if p := h.cur.Load(); p != nil && publishOnly && p.add(r) {
		return
	}
	h.other.Add(1)
}

// rtIsSetup reports whether c is a command go-redis sends when it sets up a
// new connection.
func rtIsSetup(c redis.Cmder) bool {
	switch strings.ToLower(c.Name()) {
	case "hello", "auth", "select", "readonly":
		return true
	case "client":
		args := c.Args()
		if len(args) > 1 {
			sub, _ := args[1].(string)
			sub = strings.ToLower(sub)
			return sub == "setinfo" || sub == "setname" || sub == "maint_notifications"
		}
	}
	return false
}

// send runs rt.Send inside a counting window and returns its outcome and the
// round trips attributed to it.
func (h *rtHook) send(t *testing.T, rt *signals.Runtime, thread string, sig signals.Signal) (signals.Accepted, []rtTrip) {
	t.Helper()
	p := &rtProbe{open: true}
	if !h.cur.CompareAndSwap(nil, p) {
		t.Fatal("rtHook: overlapping Send windows")
	}
	ctx := context.WithValue(t.Context(), rtProbeKey{}, p)
	acc, err := rt.Send(ctx, thread, sig)
	trips := p.close()
	h.cur.Store(nil)
	if err != nil {
		t.Fatalf("Send %s to %s: %v", sig.ID, thread, err)
	}
	return acc, trips
}

// rtHoldAgent reports every signal it is given on got and keeps its run (and
// so the thread's lease) until release is closed; then it drains follow-ups.
type rtHoldAgent struct {
	got     chan string
	release chan struct{}
}

func newRTHoldAgent() *rtHoldAgent {
	return &rtHoldAgent{got: make(chan string, 256), release: make(chan struct{})}
}

func (a *rtHoldAgent) run(ctx context.Context, run *signals.Run) error {
	for _, s := range run.Signals {
		a.got <- s.ID
	}
	select {
	case <-a.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	for {
		s, ok := run.Next(ctx)
		if !ok {
			return nil
		}
		a.got <- s.ID
	}
}

// waitGot waits until the agent was given every ID in want (in any order).
func (a *rtHoldAgent) waitGot(t *testing.T, want ...string) {
	t.Helper()
	missing := make(map[string]bool, len(want))
	for _, id := range want {
		missing[id] = true
	}
	timeout := time.After(15 * time.Second)
	for len(missing) > 0 {
		select {
		case id := <-a.got:
			delete(missing, id)
		case <-timeout:
			t.Fatalf("agent was not given %v within 15s", missing)
		}
	}
}

// rtRuntime starts a Runtime on its own go-redis client (and Backend) against
// srv, with hook (when not nil) added to that client before any use. Cleanup
// closes the runtime, then the backend, then the client.
func rtRuntime(t *testing.T, srv *redistest.Server, id string, hook redis.Hook, agent signals.Agent) *signals.Runtime {
	t.Helper()
	c := srv.Client(t) // closed by its own cleanup, which runs after the ones below
	if hook != nil {
		c.AddHook(hook)
	}
	b, err := redisstreams.New(c, redisstreams.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("backend %s Close: %v", id, err)
		}
	})
	rt, err := signals.New(b, agent, signals.WithProcessID(id))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := rt.Close(ctx); err != nil {
			t.Errorf("runtime %s Close: %v", id, err)
		}
	})
	return rt
}

// TestSendRoundTrips counts the Redis round trips Send itself makes, per
// Action, on a private redis-server, and checks each against its fast-path
// budget (sendRoundTrips: two, one for Delivered). It counts only round trips attributed to Send (see
// rtHook): for Woke, what starting the run then costs asynchronously (the
// inbox subscription, done-record read) is not Send's path and is only
// logged. The acquire script is loaded into the server's script cache by a
// warm-up Send first: the very first acquire on a server pays an extra
// EVALSHA→NOSCRIPT→EVAL round trip, which is not the fast path.
func TestSendRoundTrips(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t, redistest.Options{})

	hook := newRTHook()
	agentA, agentB := newRTHoldAgent(), newRTHoldAgent()
	// Registered first so it runs last among the cleanups that need it: the
	// runs must be released before the runtimes' Close waits for them.
	release := sync.OnceFunc(func() { close(agentA.release); close(agentB.release) })
	t.Cleanup(release)
	rtA := rtRuntime(t, srv, "rt-a", hook, agentA.run) // measured
	rtB := rtRuntime(t, srv, "rt-b", nil, agentB.run)  // owns the forwarded-to thread
	t.Cleanup(release)                                 // before the runtimes' Close

	check := func(what string, acc signals.Accepted, want signals.Action, trips []rtTrip) {
		t.Helper()
		if acc.Action != want {
			t.Fatalf("%s: Send returned %+v, want Action %v", what, acc, want)
		}
		cmds := rtCommands(trips)
		t.Logf("%s: %d round trips %v (+%d connection setup)", what, len(cmds), cmds, len(trips)-len(cmds))
		if len(cmds) == 0 {
			// Send must publish the inbox entry and the notice before it
			// returns: zero means the attribution lost track of them.
			t.Fatalf("%s: no round trip attributed to Send: the counting hook is broken", what)
		}
		if budget := sendRoundTrips[want]; len(cmds) > budget {
			t.Errorf("%s: Send made %d Redis round trips %v, budget %d", what, len(cmds), cmds, budget)
		}
	}

	// Warm-up: connections and the acquire script.
	acc, trips := hook.send(t, rtA, "rt-warm", signals.Signal{ID: "warm", Type: "msg"})
	t.Logf("warm-up (not asserted): %v, %d round trips %v, %d dials", acc.Action, len(trips), trips, hook.Dials())
	agentA.waitGot(t, "warm")

	const reps = 4
	var sentA, sentB []string
	for i := range reps {
		// Woke: a fresh thread nobody holds.
		thread := fmt.Sprintf("rt-woke-%d", i)
		id := fmt.Sprintf("w%d", i)
		otherBefore := hook.other.Load()
		acc, trips := hook.send(t, rtA, thread, signals.Signal{ID: id, Type: "msg"})
		check("Woke "+thread, acc, signals.Woke, trips)
		agentA.waitGot(t, id) // the run holds the thread from now on
		t.Logf("Woke %s: %d other round trips (background, incl. starting the run) until the agent had it",
			thread, hook.other.Load()-otherBefore)

		// Delivered: this process's run holds the thread.
		id = fmt.Sprintf("d%d", i)
		acc, trips = hook.send(t, rtA, thread, signals.Signal{ID: id, Type: "msg"})
		check("Delivered "+thread, acc, signals.Delivered, trips)
		sentA = append(sentA, id)
	}

	// Forwarded: rt-b owns the thread; rt-a (measured) sends to it.
	if acc, err := rtB.Send(t.Context(), "rt-fwd", signals.Signal{ID: "b-seed", Type: "msg"}); err != nil || acc.Action != signals.Woke {
		t.Fatalf("seed send on rt-b: %+v, %v; want Woke", acc, err)
	}
	agentB.waitGot(t, "b-seed")
	for i := range reps {
		id := fmt.Sprintf("f%d", i)
		acc, trips := hook.send(t, rtA, "rt-fwd", signals.Signal{ID: id, Type: "msg"})
		check("Forwarded rt-fwd", acc, signals.Forwarded, trips)
		if !strings.HasPrefix(acc.Owner, rtB.ProcessID()+"/") {
			t.Errorf("Forwarded: owner %q, want a run of %s", acc.Owner, rtB.ProcessID())
		}
		sentB = append(sentB, id)
	}
	t.Logf("dials on the measured client: %d", hook.Dials())

	// The counted sends did their job: every signal reaches its owner's agent.
	release()
	agentA.waitGot(t, sentA...)
	agentB.waitGot(t, sentB...)
}
