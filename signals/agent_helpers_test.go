package signals_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
	"github.com/leasebus/leasebus/signals/internal/sigtest"
)

// eachSignal gives take every signal of run, the first ones (run.Signals)
// and then each follow-up from run.Next until it reports none: the loop of
// an agent that handles its signals one at a time.
func eachSignal(ctx context.Context, run *signals.Run, take func(signals.Signal)) error {
	for _, s := range run.Signals {
		take(s)
	}
	for {
		s, ok := run.Next(ctx)
		if !ok {
			return nil
		}
		take(s)
	}
}

// s1Rig is the agent of the watch tests: every signal it is given goes to
// got, and the run given s1 waits in it until releaseS1.
type s1Rig struct {
	got  chan windowArrival
	gate chan struct{}
	once sync.Once
}

// newS1Rig returns an s1Rig whose s1 is released at the end of the test at
// the latest.
func newS1Rig(t *testing.T) *s1Rig {
	r := &s1Rig{got: make(chan windowArrival, 16), gate: make(chan struct{})}
	t.Cleanup(r.releaseS1)
	return r
}

func (r *s1Rig) releaseS1() { r.once.Do(func() { close(r.gate) }) }

// agent is the agent of the process named proc.
func (r *s1Rig) agent(proc string) signals.Agent {
	return func(ctx context.Context, run *signals.Run) error {
		return eachSignal(ctx, run, func(s signals.Signal) {
			r.got <- windowArrival{s.ID, proc, time.Now()}
			if s.ID == "s1" {
				select {
				case <-r.gate:
				case <-ctx.Done():
				}
			}
		})
	}
}

// await returns the arrival of id within bound, failing the test when it
// does not come or, unless others is set, when another signal comes first.
func (r *s1Rig) await(t *testing.T, id string, bound time.Duration, others bool) windowArrival {
	t.Helper()
	timeout := time.After(bound)
	for {
		select {
		case g := <-r.got:
			if g.id == id {
				return g
			}
			if !others {
				t.Fatalf("agent was given %s (on %s) while waiting for %s", g.id, g.proc, id)
			}
		case <-timeout:
			t.Fatalf("signal %s did not reach an agent within %v (recovery interval %v, lease TTL %v)", id, bound, windowRecovery, windowTTL)
		}
	}
}

// urlRuntime is sigtest.URLRuntime.
func urlRuntime(t *testing.T, url, prefix, id string, agent signals.Agent, hook redis.Hook, opts ...signals.Option) (rt *signals.Runtime, stop func()) {
	t.Helper()
	return sigtest.URLRuntime(t, url, prefix, id, agent, hook, opts...)
}

// endingPair starts two runtimes on srv, each on its own backend from
// redisstreams.NewURL (default clients), with windowTTL, windowRecovery and
// a 20ms linger, both running rig's agent: "A", whose process takes no wake
// notice from the work group (noWorkGroup) and whose tenures of thread the
// returned gate holds at their linger end, and "B", whose client gets hook
// before its runtime starts.
func endingPair(t *testing.T, srv *redistest.Server, thread string, hook redis.Hook) (a, b *signals.Runtime, gate *windowGate, rig *s1Rig) {
	t.Helper()
	ba, err := redisstreams.NewURL(context.Background(), srv.URL(), redisstreams.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ba.Close() })
	bb, err := redisstreams.NewURL(context.Background(), srv.URL(), redisstreams.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bb.Close() })
	bb.Client().AddHook(hook)
	gate = newWindowGate(thread)
	rig = newS1Rig(t)
	opts := []signals.Option{signals.WithLeaseTTL(windowTTL), signals.WithRecoveryInterval(windowRecovery),
		signals.WithLinger(20 * time.Millisecond)}
	a = newRuntime(t, noWorkGroup{ba}, rig.agent("A"), append(opts, signals.WithProcessID("A"),
		signals.WithHooks(signals.Hooks{LingerEnd: gate.hook}))...)
	b = newRuntime(t, bb, rig.agent("B"), append(opts, signals.WithProcessID("B"))...)
	t.Cleanup(gate.open)
	return a, b, gate, rig
}
