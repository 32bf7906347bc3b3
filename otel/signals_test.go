package leasebusotel_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/leasebus/leasebus/inmem"
	"github.com/leasebus/leasebus/pubsub"
	"github.com/leasebus/leasebus/signals"
)

// TestRunSpanLinksFollowUps: a follow-up that Run.Next gives to a running
// run becomes a link (to the follow-up's Send trace) and a "signal given"
// event on the run's span; the run's parent is the first signal's trace.
func TestRunSpanLinksFollowUps(t *testing.T) {
	tm := newTelemetry(t)
	b := inmem.New()
	defer b.Close()
	firstTaken := make(chan struct{})
	sentSecond := make(chan struct{})
	done := make(chan []string, 1)
	agent := func(ctx context.Context, run *signals.Run) error {
		ids := []string{run.Signals[0].ID}
		close(firstTaken)
		<-sentSecond
		for {
			s, ok := run.Next(ctx)
			if !ok {
				break
			}
			ids = append(ids, s.ID)
		}
		done <- ids
		return nil
	}
	rt, err := signals.New(tm.in.Wrap(b), tm.in.Agent(agent), signals.WithObserver(tm.in.Observer(nil)),
		signals.WithNextWait(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	tr := tm.tp.Tracer("test")
	ctx1, req1 := tr.Start(context.Background(), "request 1")
	if _, err := tm.in.Send(ctx1, rt, "t", signals.Signal{ID: "a", Type: "x"}); err != nil {
		t.Fatal(err)
	}
	req1.End()
	<-firstTaken
	ctx2, req2 := tr.Start(context.Background(), "request 2")
	if _, err := tm.in.Send(ctx2, rt, "t", signals.Signal{ID: "b", Type: "x"}); err != nil {
		t.Fatal(err)
	}
	req2.End()
	close(sentSecond)
	if ids := <-done; len(ids) != 2 {
		t.Fatalf("the run took %v, want a then b", ids)
	}
	run := tm.waitSpan(t, "signals run")
	if run.SpanContext.TraceID() != req1.SpanContext().TraceID() {
		t.Errorf("run span in trace %s, want the first send's %s", run.SpanContext.TraceID(), req1.SpanContext().TraceID())
	}
	linked := false
	for _, l := range run.Links {
		linked = linked || l.SpanContext.TraceID() == req2.SpanContext().TraceID()
	}
	if !linked {
		t.Errorf("run span has no link to the follow-up's trace %s: %+v", req2.SpanContext().TraceID(), run.Links)
	}
	given := false
	for _, e := range run.Events {
		given = given || e.Name == "signal given"
	}
	if !given {
		t.Errorf("run span has no 'signal given' event: %+v", run.Events)
	}
	if n := tm.sum(t, "leasebus.signals.sent", attribute.String("leasebus.signals.action", "delivered")); n != 1 {
		t.Errorf("sent delivered = %d, want 1", n)
	}
}

// TestHandlerPanicCountsAsNack: a handler that panics is counted as nacked
// and its span records the panic; the backend still recovers it and
// redelivers the event.
func TestHandlerPanicCountsAsNack(t *testing.T) {
	tm := newTelemetry(t)
	b := inmem.New()
	defer b.Close()
	bus := tm.in.Wrap(b)
	got := make(chan int, 2)
	sub, err := bus.Subscribe(context.Background(), "p", func(_ context.Context, e pubsub.Event) error {
		if e.DeliveryAttempt == 1 {
			panic("boom")
		}
		got <- e.DeliveryAttempt
		return nil
	}, pubsub.Group("g"))
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
		t.Fatal("no redelivery after the panic")
	}
	if err := bus.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	topic := attribute.String("leasebus.topic", "p")
	deadline := time.Now().Add(10 * time.Second)
	for tm.sum(t, "leasebus.events.acked", topic) != 1 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	for name, want := range map[string]int64{"leasebus.events.nacked": 1, "leasebus.events.acked": 1, "leasebus.events.redelivered": 1} {
		if n := tm.sum(t, name, topic); n != want {
			t.Errorf("%s = %d, want %d", name, n, want)
		}
	}
}
