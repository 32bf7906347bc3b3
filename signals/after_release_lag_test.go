package signals_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasebus/leasebus/inmem"
	"github.com/leasebus/leasebus/pubsub"
	"github.com/leasebus/leasebus/signals"
)

// laguInmem is inmem with two knobs: a process whose work-group reads lose
// every race (noWork, like noWorkGroup), and a GroupBacklog that cannot
// tell the lag (Lag -1, which pubsub.Backlog documents as allowed).
type laguInmem struct {
	*inmem.Backend
	noWork, lagUnknown bool
}

func (n laguInmem) Subscribe(ctx context.Context, topic string, h pubsub.Handler, opts ...pubsub.SubscribeOption) (pubsub.Subscription, error) {
	if cfg, err := pubsub.ApplyOptions(opts...); err == nil && n.noWork && topic == signals.WorkTopic && cfg.Group != "" {
		return idleSub{topic}, nil
	}
	return n.Backend.Subscribe(ctx, topic, h, opts...)
}

func (n laguInmem) GroupBacklog(ctx context.Context, topic, group string) (pubsub.Backlog, error) {
	bl, err := n.Backend.GroupBacklog(ctx, topic, group)
	if n.lagUnknown && err == nil {
		bl.Lag = -1
	}
	return bl, err
}

// TestSendToEndingTenureLagUnknown: a signal sent from B to A's ending
// tenure, A releasing 600ms later (after B's notice handler let go): A's
// afterRelease must find it. With a BacklogReader that reports Lag -1
// ("cannot tell"), Lag+Pending = -1 read as "nothing waits" (review 13 of
// 2026-11-23; the sum is gone: Lag or Pending above zero means waiting).
func TestSendToEndingTenureLagUnknown(t *testing.T) {
	for _, lagUnknown := range []bool{false, true} {
		t.Run(map[bool]string{false: "lagKnown", true: "lagUnknown"}[lagUnknown], func(t *testing.T) {
			const thread = "lu"
			b := inmem.New()
			t.Cleanup(func() { b.Close() })
			gate := newWindowGate(thread)
			t.Cleanup(gate.open)
			got := make(chan windowArrival, 16)
			agent := func(proc string) signals.Agent {
				return func(ctx context.Context, run *signals.Run) error {
					for _, s := range run.Signals {
						got <- windowArrival{s.ID, proc, time.Now()}
					}
					for {
						s, ok := run.Next(ctx)
						if !ok {
							return nil
						}
						got <- windowArrival{s.ID, proc, time.Now()}
					}
				}
			}
			opts := []signals.Option{signals.WithLeaseTTL(time.Minute), signals.WithRecoveryInterval(5 * time.Second),
				signals.WithLinger(20 * time.Millisecond)}
			a := newRuntime(t, laguInmem{b, true, lagUnknown}, agent("A"), append(opts, signals.WithProcessID("A"),
				signals.WithHooks(signals.Hooks{LingerEnd: gate.hook}))...)
			bb := newRuntime(t, laguInmem{b, false, lagUnknown}, agent("B"), append(opts, signals.WithProcessID("B"))...)
			if acc, err := a.Send(t.Context(), thread, sig("s1")); err != nil || acc.Action != signals.Woke {
				t.Fatalf("send s1: %+v, %v", acc, err)
			}
			select {
			case <-gate.entered:
			case <-time.After(20 * time.Second):
				t.Fatal("no linger end")
			}
			start := time.Now()
			if acc, err := bb.Send(t.Context(), thread, sig("s3")); err != nil || acc.Action != signals.Forwarded {
				t.Fatalf("send s3: %+v, %v; want Forwarded", acc, err)
			}
			time.Sleep(600 * time.Millisecond)
			gate.open()
			timeout := time.After(3 * time.Second)
			for {
				select {
				case g := <-got:
					if g.id == "s3" {
						t.Logf("s3 reached %s %v after its Send", g.proc, g.at.Sub(start).Round(time.Millisecond))
						return
					}
				case <-timeout:
					t.Fatalf("s3 did not run within 3s of its Send (recovery interval 5s)")
				}
			}
		})
	}
}
