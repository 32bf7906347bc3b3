package pubsub_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leasebus/leasebus/pubsub"
)

// deadBox records the dead letters a Policy publishes.
type deadBox struct {
	topics []string
	events []pubsub.Event
	err    error
}

func (d *deadBox) publish(ctx context.Context, topic string, e pubsub.Event) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	d.topics = append(d.topics, topic)
	d.events = append(d.events, e)
	return d.err
}

func policy(t *testing.T, h pubsub.Handler, box *deadBox, opts ...pubsub.SubscribeOption) *pubsub.Policy {
	t.Helper()
	cfg, err := pubsub.PrepareSubscribe("orders", h, opts...)
	if err != nil {
		t.Fatalf("PrepareSubscribe: %v", err)
	}
	return pubsub.NewPolicy("orders", h, cfg, box.publish)
}

func TestPolicyPanicIsANack(t *testing.T) {
	box := &deadBox{}
	p := policy(t, func(context.Context, pubsub.Event) error { panic("boom") }, box)
	err := p.Handle(context.Background(), pubsub.Event{ID: "e", Type: "t", DeliveryAttempt: 1})
	if err == nil || !strings.Contains(err.Error(), "panicked: boom") {
		t.Fatalf("Handle of a panicking handler = %v, want an error naming the panic", err)
	}
	if len(box.events) != 0 {
		t.Errorf("dead letters %v without MaxDeliveries, want none", box.events)
	}
}

func TestPolicyDeadLettersAtMaxDeliveries(t *testing.T) {
	box := &deadBox{}
	calls := 0
	p := policy(t, func(context.Context, pubsub.Event) error {
		calls++
		return errors.New("bad input")
	}, box, pubsub.MaxDeliveries(2))
	e := pubsub.Event{ID: "e", Type: "t", Metadata: map[string]string{"k": "v"}}
	e.DeliveryAttempt = 1
	if err := p.Handle(context.Background(), e); err == nil {
		t.Fatal("attempt 1 of 2 acked; want a nack")
	}
	e.DeliveryAttempt = 2
	if err := p.Handle(context.Background(), e); err != nil {
		t.Fatalf("attempt 2 of 2 = %v; want nil (dead-lettered, then acked)", err)
	}
	if len(box.events) != 1 || box.topics[0] != "orders.dead" {
		t.Fatalf("dead letters %v on %v, want one on orders.dead", box.events, box.topics)
	}
	d := box.events[0]
	want := map[string]string{"k": "v", pubsub.MetaDeadTopic: "orders", pubsub.MetaDeadReason: "bad input", pubsub.MetaDeadAttempts: "2"}
	for k, v := range want {
		if d.Metadata[k] != v {
			t.Errorf("dead letter Metadata[%q] = %q, want %q", k, d.Metadata[k], v)
		}
	}
	if d.DeliveryAttempt != 0 || e.Metadata[pubsub.MetaDeadTopic] != "" {
		t.Errorf("dead letter attempt %d, original metadata %v: want 0 and the original untouched", d.DeliveryAttempt, e.Metadata)
	}
	// Attempt 3: delivered twice already and never acked: dead-lettered
	// without calling the handler.
	e.DeliveryAttempt = 3
	if err := p.Handle(context.Background(), e); err != nil {
		t.Fatalf("attempt 3 of 2 = %v; want nil", err)
	}
	if calls != 2 {
		t.Errorf("handler called %d times, want 2", calls)
	}
	if r := box.events[1].Metadata[pubsub.MetaDeadReason]; !strings.Contains(r, "2 times without an ack") {
		t.Errorf("reason %q", r)
	}
}

func TestPolicyKeepsEventWhenDeadLetterFails(t *testing.T) {
	box := &deadBox{err: errors.New("store down")}
	p := policy(t, func(context.Context, pubsub.Event) error { return errors.New("bad") }, box, pubsub.MaxDeliveries(1))
	err := p.Handle(context.Background(), pubsub.Event{ID: "e", Type: "t", DeliveryAttempt: 1})
	if err == nil || !strings.Contains(err.Error(), "store down") {
		t.Fatalf("Handle = %v, want a nack carrying the dead-letter failure", err)
	}
}

func TestPolicyNoDeadLetterWhenCtxEnded(t *testing.T) {
	box := &deadBox{}
	ctx, cancel := context.WithCancel(context.Background())
	p := policy(t, func(ctx context.Context, _ pubsub.Event) error {
		cancel()
		return ctx.Err()
	}, box, pubsub.MaxDeliveries(1))
	if err := p.Handle(ctx, pubsub.Event{ID: "e", Type: "t", DeliveryAttempt: 1}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Handle = %v, want the handler's context.Canceled (a nack for the backend to hand back)", err)
	}
	if len(box.events) != 0 {
		t.Errorf("dead-lettered %d events of an ended subscription, want none", len(box.events))
	}
}

func TestPolicyRedeliveryDelay(t *testing.T) {
	ok := func(context.Context, pubsub.Event) error { return nil }
	def := policy(t, ok, &deadBox{})
	for attempt, want := range map[int]time.Duration{1: 10 * time.Millisecond, 2: 20 * time.Millisecond, 8: time.Second, 30: time.Second} {
		if got := def.RedeliveryDelay(attempt); got != want || pubsub.RetryDelay(attempt) != want {
			t.Errorf("default RedeliveryDelay(%d) = %v (RetryDelay %v), want %v", attempt, got, pubsub.RetryDelay(attempt), want)
		}
	}
	zero := policy(t, ok, &deadBox{}, pubsub.RedeliveryDelay(0))
	if got := zero.RedeliveryDelay(5); got != 0 {
		t.Errorf("RedeliveryDelay(0): delay of attempt 5 = %v, want 0", got)
	}
	long := policy(t, ok, &deadBox{}, pubsub.RedeliveryDelay(3*time.Second))
	if got := long.RedeliveryDelay(4); got != 3*time.Second {
		t.Errorf("RedeliveryDelay(3s): delay of attempt 4 = %v, want 3s (above MaxRedeliveryDelay: not doubled)", got)
	}
	half := policy(t, ok, &deadBox{}, pubsub.RedeliveryDelay(300*time.Millisecond))
	if got := half.RedeliveryDelay(3); got != time.Second {
		t.Errorf("RedeliveryDelay(300ms): delay of attempt 3 = %v, want 1s (capped)", got)
	}
	flat := policy(t, ok, &deadBox{}, pubsub.RedeliveryDelay(200*time.Millisecond), pubsub.RedeliveryCap(200*time.Millisecond))
	for _, attempt := range []int{1, 2, 9, 40} {
		if got := flat.RedeliveryDelay(attempt); got != 200*time.Millisecond {
			t.Errorf("RedeliveryDelay(200ms)+RedeliveryCap(200ms): delay of attempt %d = %v, want 200ms every time", attempt, got)
		}
	}
	wide := policy(t, ok, &deadBox{}, pubsub.RedeliveryCap(5*time.Second))
	if got := wide.RedeliveryDelay(12); got != 5*time.Second {
		t.Errorf("RedeliveryCap(5s): delay of attempt 12 = %v, want 5s (10ms doubled, capped at 5s)", got)
	}
}

func TestRedeliveryDelayOption(t *testing.T) {
	c, err := pubsub.ApplyOptions()
	if err != nil || c.RedeliveryDelay != pubsub.DefaultRedeliveryDelay {
		t.Errorf("default RedeliveryDelay = %v, %v; want %v", c.RedeliveryDelay, err, pubsub.DefaultRedeliveryDelay)
	}
	_, err = pubsub.ApplyOptions(pubsub.RedeliveryDelay(-5 * time.Millisecond))
	if !errors.Is(err, pubsub.ErrInvalid) || !strings.Contains(err.Error(), "redelivery delay -5ms") {
		t.Errorf("RedeliveryDelay(-5ms): got %v, want ErrInvalid naming the option and value", err)
	}
}
