package leasebusotel

import (
	"context"
	"fmt"
	"maps"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/leasebus/leasebus/pubsub"
)

// Attribute keys of spans and metrics.
const (
	attrSystem      = attribute.Key("messaging.system")
	attrDestination = attribute.Key("messaging.destination.name")
	attrMessageID   = attribute.Key("messaging.message.id")
	attrOperation   = attribute.Key("messaging.operation.type")
	attrConsumer    = attribute.Key("messaging.consumer.group.name")
	attrTopic       = attribute.Key("leasebus.topic")
	attrKind        = attribute.Key("leasebus.subscription")
	attrAttempt     = attribute.Key("leasebus.delivery.attempt")
	attrEventType   = attribute.Key("leasebus.event.type")
	attrErrorType   = attribute.Key("error.type")
)

// bus is a pubsub.PubSub with traces and metrics around the one it wraps.
type bus struct {
	in    *Instrumentation
	inner pubsub.PubSub
}

// Unwrap returns the wrapped PubSub, for its methods the wrapper does not
// forward (such as redisstreams.Backend.Client).
func (b *bus) Unwrap() pubsub.PubSub { return b.inner }

// Publish starts a producer span "publish <topic>", writes its trace context
// into a copy of e.Metadata (the caller's map is not changed) and publishes
// through the wrapped PubSub. It counts leasebus.events.published and
// records leasebus.events.publish.duration.
func (b *bus) Publish(ctx context.Context, topic string, e pubsub.Event) error {
	return b.publish(ctx, topic, "", e)
}

// PublishFor is Publish through the wrapped PubSub's PublishFor
// (pubsub.GroupPublisher), so that the signals runtime keeps its inbox
// guarantee through the wrapper; on a PubSub without it, it is Publish.
func (b *bus) PublishFor(ctx context.Context, topic, group string, e pubsub.Event) error {
	if _, ok := b.inner.(pubsub.GroupPublisher); !ok {
		return b.publish(ctx, topic, "", e)
	}
	if group == "" {
		return fmt.Errorf("%w: group name is empty (PublishFor on topic %q)", pubsub.ErrInvalid, topic)
	}
	return b.publish(ctx, topic, group, e)
}

func (b *bus) publish(ctx context.Context, topic, group string, e pubsub.Event) error {
	ctx, span, e := b.startPublish(ctx, topic, e)
	defer span.End()
	start := time.Now()
	var err error
	if group != "" {
		err = b.inner.(pubsub.GroupPublisher).PublishFor(ctx, topic, group, e)
	} else {
		err = b.inner.Publish(ctx, topic, e)
	}
	b.endPublish(ctx, span, topic, e, start, err)
	return err
}

// PublishBatch publishes ps through the wrapped PubSub's PublishBatch
// (pubsub.BatchPublisher), so that they still go out in one step and in
// order, with a producer span "publish <topic>" and the metrics of Publish
// per publication (all share the batch's duration). On a PubSub without it,
// it checks every publication, then publishes them one after the other
// with PublishFor (when Group is set) or Publish.
func (b *bus) PublishBatch(ctx context.Context, ps []pubsub.Publication) error {
	bp, ok := b.inner.(pubsub.BatchPublisher)
	if !ok {
		if err := pubsub.ValidatePublications(ps); err != nil {
			return err
		}
		for i, p := range ps {
			var err error
			if p.Group != "" {
				err = b.PublishFor(ctx, p.Topic, p.Group, p.Event)
			} else {
				err = b.Publish(ctx, p.Topic, p.Event)
			}
			if err != nil {
				return fmt.Errorf("publication %d of %d: %w", i, len(ps), err)
			}
		}
		return nil
	}
	out := make([]pubsub.Publication, len(ps))
	ctxs := make([]context.Context, len(ps))
	spans := make([]trace.Span, len(ps))
	for i, p := range ps {
		ctxs[i], spans[i], p.Event = b.startPublish(ctx, p.Topic, p.Event)
		out[i] = p
	}
	start := time.Now()
	err := bp.PublishBatch(ctx, out)
	for i, p := range out {
		b.endPublish(ctxs[i], spans[i], p.Topic, p.Event, start, err)
		spans[i].End()
	}
	return err
}

// startPublish starts the producer span of publishing e to topic and
// returns its ctx and e with the trace context in a copy of its metadata.
func (b *bus) startPublish(ctx context.Context, topic string, e pubsub.Event) (context.Context, trace.Span, pubsub.Event) {
	in := b.in
	if pe, err := pubsub.PrepareEvent(e); err == nil {
		e = pe // the ID is known for the span (the backend keeps it)
	}
	mt := in.topicName(topic)
	ctx, span := in.tracer.Start(ctx, "publish "+mt, trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(attrSystem.String("leasebus"), attrDestination.String(topic), attrOperation.String("send"), attrEventType.String(e.Type)))
	md := make(map[string]string, len(e.Metadata)+2)
	maps.Copy(md, e.Metadata)
	in.prop.Inject(ctx, propagation.MapCarrier(md))
	e.Metadata = md
	return ctx, span, e
}

// endPublish records the outcome err of publishing e (sent at start) on
// span and in the metrics.
func (b *bus) endPublish(ctx context.Context, span trace.Span, topic string, e pubsub.Event, start time.Time, err error) {
	in := b.in
	attrs := []attribute.KeyValue{attrTopic.String(in.topicName(topic))}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		in.m.publishDuration.Record(ctx, time.Since(start).Seconds(), metric.WithAttributes(append(attrs, attrErrorType.String(errorType(err)))...))
		return
	}
	span.SetAttributes(attrMessageID.String(e.ID))
	in.m.publishDuration.Record(ctx, time.Since(start).Seconds(), metric.WithAttributes(attrs...))
	in.m.published.Add(ctx, 1, metric.WithAttributes(attrs...))
}

// Subscribe subscribes h wrapped by Instrumentation.Handler.
func (b *bus) Subscribe(ctx context.Context, topic string, h pubsub.Handler, opts ...pubsub.SubscribeOption) (pubsub.Subscription, error) {
	if h == nil {
		return b.inner.Subscribe(ctx, topic, h, opts...) // the backend words the error
	}
	return b.inner.Subscribe(ctx, topic, b.in.Handler(topic, h, opts...), opts...)
}

// Flush calls the wrapped PubSub's Flush.
func (b *bus) Flush(ctx context.Context) error { return b.inner.Flush(ctx) }

// Close closes the wrapped PubSub.
func (b *bus) Close() error { return b.inner.Close() }

// Handler returns h with a consumer span and the delivery metrics, for a
// subscription to topic made with opts (Wrap's Subscribe uses it; call it
// yourself for a backend you do not wrap). The span "process <topic>" has
// the trace context found in Event.Metadata as its parent, so it belongs to
// the trace of the Publish; the handler's ctx carries the span. A handler
// that returns an error, panics or ends its goroutine (runtime.Goexit)
// counts as nacked (a panic is passed on to the backend, which recovers
// it); one whose failure is its MaxDeliveries-th attempt counts as
// dead-lettered too, unless its ctx had ended when it returned (the
// subscription stopping: the backend hands the event back instead). A stop
// that comes between the handler's return and the policy's own look at the
// ctx can still leave one such failure counted as dead-lettered (review
// h61: the wrapper cannot see what the policy decides).
func (in *Instrumentation) Handler(topic string, h pubsub.Handler, opts ...pubsub.SubscribeOption) pubsub.Handler {
	cfg, _ := pubsub.ApplyOptions(opts...) // a bad option fails Subscribe itself
	mt := in.topicName(topic)
	attrs := []attribute.KeyValue{attrTopic.String(mt), attrKind.String("fan-out")}
	spanAttrs := []attribute.KeyValue{attrSystem.String("leasebus"), attrDestination.String(topic), attrOperation.String("process")}
	if cfg.Group != "" {
		attrs[1] = attrKind.String("group")
		attrs = append(attrs, attrConsumer.String(cfg.Group))
		spanAttrs = append(spanAttrs, attrConsumer.String(cfg.Group))
	}
	set := metric.WithAttributes(attrs...)
	return func(ctx context.Context, e pubsub.Event) (err error) {
		if len(e.Metadata) > 0 {
			ctx = in.prop.Extract(ctx, propagation.MapCarrier(e.Metadata))
		}
		ctx, span := in.tracer.Start(ctx, "process "+mt, trace.WithSpanKind(trace.SpanKindConsumer),
			trace.WithAttributes(spanAttrs...),
			trace.WithAttributes(attrMessageID.String(e.ID), attrEventType.String(e.Type), attrAttempt.Int(e.DeliveryAttempt)))
		in.m.delivered.Add(ctx, 1, set)
		if e.DeliveryAttempt > 1 {
			in.m.redelivered.Add(ctx, 1, set)
		}
		failed := func(err error) {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
			in.m.nacked.Add(ctx, 1, set)
			// The policy dead-letters a failed last attempt, except one
			// whose ctx ended (the subscription stopping: the backend hands
			// it back; TestFailureAsItStopsIsNotDeadLettered).
			if cfg.MaxDeliveries > 0 && e.DeliveryAttempt >= cfg.MaxDeliveries && ctx.Err() == nil {
				in.m.deadLettered.Add(ctx, 1, set)
				span.AddEvent("dead-lettered")
			}
			span.End()
		}
		returned := false
		defer func() {
			if r := recover(); r != nil {
				failed(fmt.Errorf("panic: %v", r))
				panic(r)
			}
			if !returned {
				// The handler ended its goroutine (runtime.Goexit): the
				// backend nacks it (pubsub.ErrHandlerExited).
				failed(pubsub.ErrHandlerExited)
			}
		}()
		err = h(ctx, e)
		returned = true
		if err != nil {
			failed(err)
			return err
		}
		in.m.acked.Add(ctx, 1, set)
		span.End()
		return nil
	}
}

// errorType returns the error.type attribute of err: its Go type.
func errorType(err error) string { return fmt.Sprintf("%T", err) }
