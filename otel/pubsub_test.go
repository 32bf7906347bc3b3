package leasebusotel_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
	"github.com/leasebus/leasebus/redisstreams"
)

// twoBackends returns two redisstreams Backends on one real redis-server,
// with the same key prefix: a publisher and a subscriber, as two processes
// would have.
func twoBackends(t *testing.T) (*redisstreams.Backend, *redisstreams.Backend, string) {
	t.Helper()
	srv := redistest.Start(t, redistest.Options{})
	var bs [2]*redisstreams.Backend
	for i := range bs {
		b, err := redisstreams.NewURL(context.Background(), srv.URL(), redisstreams.Options{Prefix: "otel-test"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		bs[i] = b
	}
	return bs[0], bs[1], srv.URL()
}

// TestPublishDeliveryOneTrace: a Publish on one Backend and its delivery on
// another are one trace: the consumer span's parent is the producer span,
// whose parent is the caller's span, carried as W3C trace context in
// Event.Metadata through Redis.
func TestPublishDeliveryOneTrace(t *testing.T) {
	pubB, subB, _ := twoBackends(t)
	// Each side has its own Instrumentation, as two processes would; they
	// export to one in-memory exporter so the test sees both.
	tm := newTelemetry(t)
	pub, sub := tm.in.Wrap(pubB), tm.in.Wrap(subB)

	got := make(chan trace.SpanContext, 1)
	s, err := sub.Subscribe(context.Background(), "orders", func(ctx context.Context, e pubsub.Event) error {
		got <- trace.SpanContextFromContext(ctx)
		return nil
	}, pubsub.Group("billing"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Unsubscribe(context.Background())

	ctx, root := tm.tp.Tracer("test").Start(context.Background(), "request")
	md := map[string]string{"src": "test"}
	if err := pub.Publish(ctx, "orders", pubsub.Event{Type: "order.created", Metadata: md}); err != nil {
		t.Fatal(err)
	}
	root.End()
	if len(md) != 1 {
		t.Errorf("Publish changed the caller's metadata: %v", md)
	}
	var handlerSpan trace.SpanContext
	select {
	case handlerSpan = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("no delivery")
	}
	if err := sub.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	traceID := root.SpanContext().TraceID()
	if handlerSpan.TraceID() != traceID {
		t.Errorf("the handler's trace %s, want the publisher's %s", handlerSpan.TraceID(), traceID)
	}
	p, c := tm.span(t, "publish orders"), tm.waitSpan(t, "process orders")
	if p.SpanKind != trace.SpanKindProducer || c.SpanKind != trace.SpanKindConsumer {
		t.Errorf("span kinds %v, %v; want producer, consumer", p.SpanKind, c.SpanKind)
	}
	if p.Parent.SpanID() != root.SpanContext().SpanID() || p.SpanContext.TraceID() != traceID {
		t.Errorf("publish span's parent %s, want the caller's span %s", p.Parent.SpanID(), root.SpanContext().SpanID())
	}
	if c.Parent.SpanID() != p.SpanContext.SpanID() || !c.Parent.IsRemote() || c.SpanContext.TraceID() != traceID {
		t.Errorf("process span's parent %s (remote %v), want the publish span %s", c.Parent.SpanID(), c.Parent.IsRemote(), p.SpanContext.SpanID())
	}
	if c.SpanContext.SpanID() != handlerSpan.SpanID() {
		t.Errorf("the handler's ctx carries span %s, want the process span %s", handlerSpan.SpanID(), c.SpanContext.SpanID())
	}
	if v := attrOf(c, "messaging.message.id").AsString(); v == "" || v != attrOf(p, "messaging.message.id").AsString() {
		t.Errorf("message ids: publish %q, process %q", attrOf(p, "messaging.message.id").AsString(), v)
	}
	topic := attribute.String("leasebus.topic", "orders")
	for name, want := range map[string]int64{
		"leasebus.events.published": 1, "leasebus.events.delivered": 1, "leasebus.events.acked": 1,
		"leasebus.events.nacked": 0, "leasebus.events.redelivered": 0, "leasebus.events.publish.duration": 1,
	} {
		if n := tm.sum(t, name, topic); n != want {
			t.Errorf("%s = %d, want %d", name, n, want)
		}
	}
	if n := tm.sum(t, "leasebus.events.delivered", attribute.String("messaging.consumer.group.name", "billing"), attribute.String("leasebus.subscription", "group")); n != 1 {
		t.Errorf("delivered with the group attributes = %d, want 1", n)
	}
}

// TestNackRedeliverDeadLetterMetrics: a handler that always fails, with
// MaxDeliveries(2), is delivered twice (one redelivery), nacked twice, and
// its event dead-lettered once; the dead letter arrives on <topic>.dead.
func TestNackRedeliverDeadLetterMetrics(t *testing.T) {
	pubB, subB, _ := twoBackends(t)
	tm := newTelemetry(t)
	pub, sub := tm.in.Wrap(pubB), tm.in.Wrap(subB)
	dead := make(chan pubsub.Event, 1)
	ds, err := pub.Subscribe(context.Background(), pubsub.DeadLetterTopic("jobs"), func(_ context.Context, e pubsub.Event) error {
		dead <- e
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer ds.Unsubscribe(context.Background())
	s, err := sub.Subscribe(context.Background(), "jobs", func(context.Context, pubsub.Event) error {
		return errors.New("always fails")
	}, pubsub.Group("workers"), pubsub.MaxDeliveries(2))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Unsubscribe(context.Background())
	if err := pub.Publish(context.Background(), "jobs", pubsub.Event{Type: "job"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-dead:
	case <-time.After(15 * time.Second):
		t.Fatal("no dead letter")
	}
	topic := attribute.String("leasebus.topic", "jobs")
	for name, want := range map[string]int64{
		"leasebus.events.delivered": 2, "leasebus.events.redelivered": 1, "leasebus.events.nacked": 2,
		"leasebus.events.acked": 0, "leasebus.events.dead_lettered": 1,
	} {
		if n := tm.sum(t, name, topic); n != want {
			t.Errorf("%s = %d, want %d", name, n, want)
		}
	}
	if n := tm.sum(t, "leasebus.events.delivered", attribute.String("leasebus.topic", "jobs.dead"), attribute.String("leasebus.subscription", "fan-out")); n != 1 {
		t.Errorf("dead letters delivered = %d, want 1", n)
	}
}

// TestPublishBatchThroughWrapper: the wrapper passes pubsub.BatchPublisher
// on, so a batch still goes out in one step; each publication gets its own
// producer span (a child of the caller's) and is counted as published, and
// its delivery's consumer span is the child of its producer span. A
// publication with Group creates the group: its event waits for a member
// that subscribes only afterwards.
func TestPublishBatchThroughWrapper(t *testing.T) {
	pubB, subB, _ := twoBackends(t)
	tm := newTelemetry(t)
	pub, sub := tm.in.Wrap(pubB), tm.in.Wrap(subB)
	bp, ok := pub.(pubsub.BatchPublisher)
	if !ok {
		t.Fatalf("%T does not pass pubsub.BatchPublisher on", pub)
	}
	got := make(chan string, 4)
	s1, err := sub.Subscribe(context.Background(), "notes", func(ctx context.Context, e pubsub.Event) error {
		got <- e.ID
		return nil
	}, pubsub.Group("readers"))
	if err != nil {
		t.Fatal(err)
	}
	defer s1.Unsubscribe(context.Background())

	ctx, root := tm.tp.Tracer("test").Start(context.Background(), "request")
	err = bp.PublishBatch(ctx, []pubsub.Publication{
		{Topic: "inbox", Group: "owner", Event: pubsub.Event{ID: "i1", Type: "signal"}},
		{Topic: "notes", Event: pubsub.Event{ID: "n1", Type: "notice"}},
	})
	root.End()
	if err != nil {
		t.Fatal(err)
	}
	s2, err := sub.Subscribe(context.Background(), "inbox", func(ctx context.Context, e pubsub.Event) error {
		got <- e.ID
		return nil
	}, pubsub.Group("owner"))
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Unsubscribe(context.Background())
	seen := map[string]bool{}
	for len(seen) < 2 {
		select {
		case id := <-got:
			seen[id] = true
		case <-time.After(10 * time.Second):
			t.Fatalf("delivered %v, want i1 and n1", seen)
		}
	}
	if err := sub.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, topic := range []string{"inbox", "notes"} {
		p, c := tm.span(t, "publish "+topic), tm.waitSpan(t, "process "+topic)
		if p.Parent.SpanID() != root.SpanContext().SpanID() {
			t.Errorf("publish %s: parent %s, want the caller's span %s", topic, p.Parent.SpanID(), root.SpanContext().SpanID())
		}
		if c.Parent.SpanID() != p.SpanContext.SpanID() {
			t.Errorf("process %s: parent %s, want its publish span %s", topic, c.Parent.SpanID(), p.SpanContext.SpanID())
		}
		if n := tm.sum(t, "leasebus.events.published", attribute.String("leasebus.topic", topic)); n != 1 {
			t.Errorf("published on %s = %d, want 1", topic, n)
		}
	}
}
