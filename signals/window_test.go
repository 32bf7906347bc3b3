package signals_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

// The window tests pin a tenure at the moment it ends, with a test hook that
// blocks its goroutine there, and make a Send land in that moment: the owner
// "finishes its run at the moment the signal arrives" (DESIGN.md, guarantee
// 2). Lease TTL and recovery interval are far longer than the bound the
// signal must arrive within, so a pass cannot come from the recovery path
// (a recheck every recovery interval, a notice nacked after a quarter of the
// TTL, or a lease expiring): the runtime must close the window by itself.
const (
	windowTTL      = 2 * time.Minute
	windowRecovery = time.Minute
	windowBound    = 10 * time.Second // well below windowRecovery and windowTTL/4
)

// windowGate blocks the first call of a hook for thread until proceed is
// closed; entered is closed when that call came.
type windowGate struct {
	thread   string
	entered  chan struct{}
	proceed  chan struct{}
	once     sync.Once
	openOnce sync.Once
}

func newWindowGate(thread string) *windowGate {
	return &windowGate{thread: thread, entered: make(chan struct{}), proceed: make(chan struct{})}
}

func (g *windowGate) hook(thread string) {
	if thread != g.thread {
		return
	}
	first := false
	g.once.Do(func() { first = true; close(g.entered) })
	if first {
		<-g.proceed
	}
}

func (g *windowGate) open() { g.openOnce.Do(func() { close(g.proceed) }) }

// windowArrival is a signal given to an agent.
type windowArrival struct {
	id, proc string
	at       time.Time
}

// windowAgent reports every signal it is given (from Run.Signals and
// Run.Next) with the name of its runtime, and counts overlapping runs.
type windowAgent struct {
	got     chan windowArrival
	mu      sync.Mutex
	active  int
	overlap int
}

func (a *windowAgent) agent(proc string) signals.Agent {
	return func(ctx context.Context, run *signals.Run) error {
		a.mu.Lock()
		a.active++
		if a.active > 1 {
			a.overlap++
		}
		a.mu.Unlock()
		defer func() {
			a.mu.Lock()
			a.active--
			a.mu.Unlock()
		}()
		for _, s := range run.Signals {
			a.got <- windowArrival{s.ID, proc, time.Now()}
		}
		for {
			s, ok := run.Next(ctx)
			if !ok {
				return nil
			}
			a.got <- windowArrival{s.ID, proc, time.Now()}
		}
	}
}

func (a *windowAgent) wait(t *testing.T, id string, bound time.Duration) windowArrival {
	t.Helper()
	timeout := time.NewTimer(bound)
	defer timeout.Stop()
	for {
		select {
		case g := <-a.got:
			if g.id == id {
				return g
			}
			t.Fatalf("agent was given %s (on %s) while waiting for %s", g.id, g.proc, id)
		case <-timeout.C:
			t.Fatalf("signal %s did not reach an agent within %v (recovery interval %v, lease TTL %v)",
				id, bound, windowRecovery, windowTTL)
		}
	}
}

// windowPubSubs returns the pubsubs of two runtimes standing in for two
// processes: one in-memory backend shared by both, or two redisstreams
// backends, each on its own client, on a private redis-server.
func windowPubSubs(t *testing.T, backend string) (pubsub.PubSub, pubsub.PubSub) {
	t.Helper()
	if backend == "inmem" {
		b := newBackend(t)
		return b, b
	}
	redistest.Require(t)
	srv := redistest.Start(t, redistest.Options{})
	var out [2]pubsub.PubSub
	for i := range out {
		b, err := redisstreams.New(srv.Client(t), redisstreams.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		out[i] = b
	}
	return out[0], out[1]
}

// TestSendToEndingTenure makes a Send land while the thread's tenure (on
// runtime A) ends: after its linger time passed, before it stopped reading
// its inbox (LingerEnd), and after it stopped reading, before it released
// the lease (BeforeRelease); from A itself and from another runtime B. The
// signal must reach an agent within windowBound, run once, after the
// signal before it.
func TestSendToEndingTenure(t *testing.T) {
	cases := []struct {
		point, from string
		want        signals.Action
	}{
		// Still subscribed: the local Send finds the tenure live. It then
		// ends without taking the signal; the notice handler takes over.
		{"LingerEnd", "A", signals.Delivered},
		// The same with A alone, so that A's own notice handler (waiting
		// on the ending tenure) is the one that takes over.
		{"LingerEnd", "Aalone", signals.Delivered},
		// The lease is held: B is told A owns the thread; whichever
		// runtime's notice handler has the notice takes over.
		{"LingerEnd", "B", signals.Forwarded},
		// A's Send waits for its ending tenure to release and takes the
		// thread itself.
		{"BeforeRelease", "A", signals.Woke},
		{"BeforeRelease", "B", signals.Forwarded},
	}
	for _, backend := range []string{"inmem", "redis"} {
		for _, tc := range cases {
			t.Run(fmt.Sprintf("%s/%s/from%s", backend, tc.point, tc.from), func(t *testing.T) {
				const thread = "ending"
				psA, psB := windowPubSubs(t, backend)
				gate := newWindowGate(thread)
				var hooks signals.Hooks
				if tc.point == "LingerEnd" {
					hooks.LingerEnd = gate.hook
				} else {
					hooks.BeforeRelease = gate.hook
				}
				ag := &windowAgent{got: make(chan windowArrival, 16)}
				opts := []signals.Option{signals.WithLeaseTTL(windowTTL), signals.WithRecoveryInterval(windowRecovery),
					signals.WithLinger(20 * time.Millisecond)}
				a := newRuntime(t, psA, ag.agent("A"), append(opts, signals.WithProcessID("A"), signals.WithHooks(hooks))...)
				var b *signals.Runtime
				if tc.from != "Aalone" {
					b = newRuntime(t, psB, ag.agent("B"), append(opts, signals.WithProcessID("B"))...)
				}
				t.Cleanup(gate.open) // before the runtimes' Close

				if acc, err := a.Send(t.Context(), thread, sig("first")); err != nil || acc.Action != signals.Woke {
					t.Fatalf("first send: %+v, %v; want Woke", acc, err)
				}
				ag.wait(t, "first", windowBound)
				select {
				case <-gate.entered:
				case <-time.After(windowBound):
					t.Fatalf("A's tenure did not reach %s within %v", tc.point, windowBound)
				}
				sender := a
				if tc.from == "B" {
					sender = b
				}
				type result struct {
					acc signals.Accepted
					err error
				}
				res := make(chan result, 1)
				start := time.Now()
				go func() {
					acc, err := sender.Send(context.Background(), thread, sig("second"))
					res <- result{acc, err}
				}()
				var r result
				select {
				case r = <-res:
					gate.open()
				case <-time.After(100 * time.Millisecond):
					// Send waits for the ending tenure (BeforeRelease, from
					// A): let the tenure go on.
					gate.open()
					select {
					case r = <-res:
					case <-time.After(windowBound):
						t.Fatalf("Send did not return within %v after the tenure went on", windowBound)
					}
				}
				if r.err != nil {
					t.Fatalf("second send: %v", r.err)
				}
				if r.acc.Action != tc.want {
					t.Fatalf("second send: %+v, want %v", r.acc, tc.want)
				}
				if tc.want == signals.Forwarded && !strings.HasPrefix(r.acc.Owner, "A/") {
					t.Fatalf("second send forwarded to %q, want a run of A", r.acc.Owner)
				}
				got := ag.wait(t, "second", windowBound)
				t.Logf("%v; the signal reached %s's agent %v after Send started", r.acc.Action, got.proc, got.at.Sub(start).Round(time.Millisecond))
				// Nothing else runs: each signal once.
				select {
				case g := <-ag.got:
					t.Fatalf("agent was given %s again (on %s)", g.id, g.proc)
				case <-time.After(100 * time.Millisecond):
				}
				ag.mu.Lock()
				defer ag.mu.Unlock()
				if ag.overlap != 0 {
					t.Fatal("two runs of the thread overlapped")
				}
			})
		}
	}
}
