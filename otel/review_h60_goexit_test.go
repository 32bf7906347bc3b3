package leasebusotel_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"

	"github.com/leasebus/leasebus/inmem"
	"github.com/leasebus/leasebus/pubsub"
	"github.com/leasebus/leasebus/signals"
)

// TestReviewH60HandlerGoexitCountsAsNack: a handler that ends its goroutine
// (runtime.Goexit, as t.FailNow in a handler does) nacks, as
// pubsub.ErrHandlerExited says; the wrapped handler counts it as nacked and
// ends its span with an error, as it does for a panic (review h60).
func TestReviewH60HandlerGoexitCountsAsNack(t *testing.T) {
	tm := newTelemetry(t)
	b := inmem.New()
	defer b.Close()
	bus := tm.in.Wrap(b)
	got := make(chan int, 2)
	sub, err := bus.Subscribe(context.Background(), "p", func(_ context.Context, e pubsub.Event) error {
		if e.DeliveryAttempt == 1 {
			runtime.Goexit()
		}
		got <- e.DeliveryAttempt
		return nil
	}, pubsub.Group("g"), pubsub.RedeliveryDelay(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe(context.Background())
	if err := bus.Publish(context.Background(), "p", pubsub.Event{Type: "x"}); err != nil {
		t.Fatal(err)
	}
	select {
	case a := <-got:
		if a != 2 {
			t.Errorf("redelivered with attempt %d, want 2", a)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no redelivery after the Goexit")
	}
	if err := bus.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	topic := attribute.String("leasebus.topic", "p")
	deadline := time.Now().Add(10 * time.Second)
	for tm.sum(t, "leasebus.events.acked", topic) != 1 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	for name, want := range map[string]int64{"leasebus.events.nacked": 1, "leasebus.events.acked": 1, "leasebus.events.delivered": 2} {
		if n := tm.sum(t, name, topic); n != want {
			t.Errorf("%s = %d, want %d", name, n, want)
		}
	}
	var ended, failed int
	for _, s := range tm.spans.GetSpans() {
		if s.Name == "process p" {
			ended++
			if s.Status.Code == codes.Error {
				failed++
			}
		}
	}
	if ended != 2 || failed != 1 {
		t.Errorf("%d 'process p' spans ended (%d with an error), want 2 (1: the Goexit's attempt)", ended, failed)
	}
}

// TestReviewH60AgentEndsItsSpan: an agent that panics or ends its goroutine
// ends its run with an error (signals.Agent); the wrapped agent ends the
// run's span with an error and records the run's duration, as for an
// error it returns (review h60).
func TestReviewH60AgentEndsItsSpan(t *testing.T) {
	for name, agent := range map[string]signals.Agent{
		"Panic":  func(context.Context, *signals.Run) error { panic("boom") },
		"Goexit": func(context.Context, *signals.Run) error { runtime.Goexit(); return nil },
	} {
		t.Run(name, func(t *testing.T) {
			tm := newTelemetry(t)
			b := inmem.New()
			defer b.Close()
			ended := make(chan signals.Event, 1)
			rt, err := signals.New(tm.in.Wrap(b), tm.in.Agent(agent), signals.WithObserver(tm.in.Observer(func(ev signals.Event) {
				if ev.Kind == signals.RunEnded {
					select {
					case ended <- ev:
					default:
					}
				}
			})))
			if err != nil {
				t.Fatal(err)
			}
			defer rt.Close(context.Background())
			if _, err := tm.in.Send(context.Background(), rt, "t", signals.Signal{ID: "a", Type: "x"}); err != nil {
				t.Fatal(err)
			}
			select {
			case ev := <-ended:
				if ev.Err == nil {
					t.Errorf("RunEnded without an error")
				}
			case <-time.After(10 * time.Second):
				t.Fatal("no RunEnded")
			}
			var spans, failed int
			for _, s := range tm.spans.GetSpans() {
				if s.Name == "signals run" {
					spans++
					if s.Status.Code == codes.Error {
						failed++
					}
				}
			}
			if spans != 1 || failed != 1 {
				t.Errorf("%d 'signals run' spans ended (%d with an error), want 1 with an error", spans, failed)
			}
			if n := tm.sum(t, "leasebus.signals.run.duration", attribute.String("leasebus.outcome", "error")); n != 1 {
				t.Errorf("run.duration with outcome error recorded %d times, want 1", n)
			}
		})
	}
}
