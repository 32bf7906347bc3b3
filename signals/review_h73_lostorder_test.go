package signals_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/pubsub"
	"github.com/leasebus/leasebus/signals"
)

// h73SlowInbox is h73LostTransfer whose inbox subscriptions of thread
// "h" wait for gate in Unsubscribe, as on a server that does not answer.
type h73SlowInbox struct {
	*h73LostTransfer
	gate chan struct{}
}

func (x *h73SlowInbox) Subscribe(ctx context.Context, topic string, h pubsub.Handler, opts ...pubsub.SubscribeOption) (pubsub.Subscription, error) {
	sub, err := x.Backend.Subscribe(ctx, topic, h, opts...)
	if err != nil || topic != signals.InboxTopic("h") {
		return sub, err
	}
	return &h73GatedSub{Subscription: sub, gate: x.gate}, nil
}

type h73GatedSub struct {
	pubsub.Subscription
	gate chan struct{}
}

func (s *h73GatedSub) Kick() {
	if k, ok := s.Subscription.(pubsub.Kicker); ok {
		k.Kick()
	}
}

func (s *h73GatedSub) Unsubscribe(ctx context.Context) error {
	select {
	case <-s.gate:
	case <-ctx.Done():
	}
	return s.Subscription.Unsubscribe(ctx)
}

// TestReviewH73NoEventAfterLeaseLost: LeaseLost now comes before the
// tenure's inbox subscription's clean-up (6af68f8), which on a server that
// does not answer takes up to 10s; the tenure's cancel control ends only
// after it (ctlEnded, in the deferred release). A tenure that ends with its
// lease lost in the middle of a hand-off (lease.Held.Transfer failed
// closed: its run-to-be was marked starting) then still takes a Cancel in
// that window as one for a run about to start: it emits Cancelled (no
// RunID) after its LeaseLost, and the Cancel waits for the clean-up to end
// to be told the tenure is gone. Before 6af68f8 LeaseLost came after the
// control ended. An observer must see no event of a tenure after its
// LeaseLost.
func TestReviewH73NoEventAfterLeaseLost(t *testing.T) {
	b := newBackend(t)
	x := &h73SlowInbox{h73LostTransfer: &h73LostTransfer{Backend: b}, gate: make(chan struct{})}
	release := make(chan struct{})
	started := make(chan struct{}, 4)
	agent := func(ctx context.Context, r *signals.Run) error {
		started <- struct{}{}
		if r.Signals[0].ID == "first" {
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return nil
	}
	var (
		mu     sync.Mutex
		events []signals.Event
		lostCh = make(chan struct{})
	)
	observe := signals.WithObserver(func(e signals.Event) {
		if e.Thread != "h" {
			return
		}
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
		if e.Kind == signals.LeaseLost {
			close(lostCh)
		}
	})
	rt := newRuntime(t, x, agent, signals.WithLeaseTTL(8*time.Second), signals.WithLinger(time.Second), observe)
	var once sync.Once
	open := func() { once.Do(func() { close(x.gate) }) }
	t.Cleanup(open)
	ctx := t.Context()
	if acc, err := rt.Send(ctx, "h", sig("first")); err != nil || acc.Action != signals.Woke {
		t.Fatalf("first Send: %+v, %v", acc, err)
	}
	<-started
	if acc, err := rt.Send(ctx, "h", sig("queued")); err != nil || acc.Action != signals.Delivered {
		t.Fatalf("queued Send: %+v, %v", acc, err)
	}
	x.armed.Store(true)
	close(release)
	select {
	case <-lostCh:
	case <-time.After(5 * time.Second):
		t.Fatal("premise: no LeaseLost within 5s of the failed hand-off")
	}
	type result struct {
		res signals.CancelResult
		err error
		in  time.Duration
	}
	done := make(chan result, 1)
	go func() {
		at := time.Now()
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		res, err := rt.Cancel(cctx, "h", "h73")
		done <- result{res, err, time.Since(at)}
	}()
	var r result
	select {
	case r = <-done:
	case <-time.After(1500 * time.Millisecond):
		t.Errorf("Cancel of a tenure that reported LeaseLost did not return within 1.5s (its inbox clean-up is held)")
		open()
		r = <-done
	}
	open()
	t.Logf("Cancel after LeaseLost: %+v, %v, in %v", r.res, r.err, r.in.Round(time.Millisecond))
	mu.Lock()
	defer mu.Unlock()
	seenLost := false
	for _, e := range events {
		if e.Kind == signals.LeaseLost {
			seenLost = true
			if !errors.Is(e.Err, lease.ErrTransferUnknown) {
				t.Errorf("premise: LeaseLost with %v, want lease.ErrTransferUnknown", e.Err)
			}
			continue
		}
		if seenLost && e.Kind == signals.Cancelled && e.RunID == "" {
			t.Errorf("event %v (RunID %q, Err %v) of the lost tenure came after its LeaseLost", e.Kind, e.RunID, e.Err)
		}
	}
}
