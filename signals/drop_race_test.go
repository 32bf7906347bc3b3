package signals_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/leasebus/leasebus/pubsub"
	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

// slowCancelReq delays the publish of cancel requests on ControlTopic (a
// slow network between the controller and the owner), nothing else.
type slowCancelReq struct {
	*redisstreams.Backend
	d time.Duration
}

func (s slowCancelReq) Publish(ctx context.Context, topic string, e pubsub.Event) error {
	if topic == signals.ControlTopic && e.Type == "signals.cancel" {
		time.Sleep(s.d)
	}
	return s.Backend.Publish(ctx, topic, e)
}

// TestDropMarkReadBeforeRequest: Cancel(DropQueued) publishes its drop
// mark into the inbox, then sends the request to the owner. A Send that
// lands in between makes the owner read (and ack) the mark before the
// request arrives. Found by review: the request then turned the drop on for
// a mark that would never be read again, and every later signal of the
// tenure was dropped, although "Signals sent after Cancel returned run as
// usual". The request of a mark already read must start no drop.
func TestDropMarkReadBeforeRequest(t *testing.T) {
	_, c := startRedis(t)
	b, err := redisstreams.New(c, redisstreams.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	ag := newBlocker()
	rt := newRuntime(t, b, ag.agent, signals.WithLinger(30*time.Second))
	ctx := context.Background()
	ctl, err := signals.NewController(ctx, slowCancelReq{b, 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ctl.Close() })

	if _, err := rt.Send(ctx, "t", sig("s1")); err != nil {
		t.Fatal(err)
	}
	ag.expect(t, "s1")
	type result struct {
		res signals.CancelResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := ctl.Cancel(ctx, "t", "stop", signals.DropQueued())
		done <- result{res, err}
	}()
	time.Sleep(100 * time.Millisecond) // the mark is in the inbox, the request not sent yet
	if _, err := rt.Send(ctx, "t", sig("a")); err != nil {
		t.Fatal(err)
	}
	ag.expect(t, "a")
	r := <-done
	t.Logf("Cancel = %+v, %v", r.res, r.err)
	if r.err != nil {
		t.Fatal(r.err)
	}
	// Sent after Cancel returned: must run.
	if _, err := rt.Send(ctx, "t", sig("b")); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-ag.got:
		t.Logf("ran %s", got)
	case <-time.After(5 * time.Second):
		st, _ := rt.Status(ctx, "t")
		t.Fatalf("signal b, sent after Cancel returned, did not run within 5s (started %v; status %+v)", ag.startedIDs(), st)
	}
}

// TestDropMarkRaceNatural: the same race without any injected delay: a
// Cancel(DropQueued) from another runtime and a Send to the thread at the
// same moment, then one Send after Cancel returned, which must run (10 of
// 20 rounds lost it before the fix).
func TestDropMarkRaceNatural(t *testing.T) {
	_, c := startRedis(t)
	b, err := redisstreams.New(c, redisstreams.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	ran := make(chan string, 100)
	owner := newRuntime(t, b, func(ctx context.Context, run *signals.Run) error {
		for _, s := range run.Signals {
			ran <- s.ID
		}
		return nil
	}, signals.WithLinger(30*time.Second), signals.WithProcessID("owner"))
	other := newRuntime(t, b, func(context.Context, *signals.Run) error { return nil }, signals.WithProcessID("other"))
	ctx := context.Background()
	wait := func(id string, d time.Duration) bool {
		timer := time.After(d)
		for {
			select {
			case got := <-ran:
				if got == id {
					return true
				}
			case <-timer:
				return false
			}
		}
	}
	const rounds = 20
	lost := 0
	for i := range rounds {
		th := fmt.Sprint("t", i)
		if _, err := owner.Send(ctx, th, sig(th+"-s1")); err != nil {
			t.Fatal(err)
		}
		if !wait(th+"-s1", 5*time.Second) {
			t.Fatal("s1 did not run")
		}
		done := make(chan error, 1)
		go func() {
			_, err := other.Cancel(ctx, th, "stop", signals.DropQueued())
			done <- err
		}()
		time.Sleep(time.Duration(i%5) * 200 * time.Microsecond)
		if _, err := owner.Send(ctx, th, sig(th+"-a")); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if _, err := owner.Send(ctx, th, sig(th+"-b")); err != nil {
			t.Fatal(err)
		}
		if !wait(th+"-b", 3*time.Second) {
			lost++
			t.Logf("round %d: %s-b, sent after Cancel returned, never ran", i, th)
		}
	}
	if lost > 0 {
		t.Fatalf("%d of %d rounds dropped a signal sent after Cancel(DropQueued) returned", lost, rounds)
	}
}
