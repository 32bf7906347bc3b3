package leasebusotel

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/leasebus/leasebus/signals"
)

// ScopeName is the instrumentation scope of the tracer and the meter.
const ScopeName = "github.com/leasebus/leasebus/otel"

// ErrInvalid is wrapped by every error about bad input; the message names
// the field.
var ErrInvalid = errors.New("leasebusotel: invalid argument")

// Options configures New. The zero value uses the global providers and the
// W3C trace context propagator.
type Options struct {
	// TracerProvider makes the tracer. Default: otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// MeterProvider makes the meter. Default: otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
	// Propagator writes and reads the trace context in Event.Metadata and
	// Signal.Metadata. Default: propagation.TraceContext{} (W3C
	// traceparent/tracestate), whatever the global propagator is.
	Propagator propagation.TextMapPropagator
	// MetricTopic maps a topic to the value of the leasebus.topic metric
	// attribute and the span names, which must have few distinct values.
	// Default: DefaultMetricTopic. Spans carry the full topic in
	// messaging.destination.name.
	MetricTopic func(topic string) string
}

// DefaultMetricTopic returns topic, except for the per-thread inbox topics of
// the signals runtime ("signals.thread.<thread>", and their dead-letter
// topics), which it folds into "signals.thread.*" (".dead"), so that metrics
// do not get one series per thread.
func DefaultMetricTopic(topic string) string {
	inbox := signals.InboxTopic("")
	if !strings.HasPrefix(topic, inbox) {
		return topic
	}
	if strings.HasSuffix(topic, ".dead") {
		return inbox + "*.dead"
	}
	return inbox + "*"
}

// Instrumentation holds the tracer, the meter's instruments and the
// propagator. It is safe for concurrent use; one is enough per process.
type Instrumentation struct {
	tracer    trace.Tracer
	prop      propagation.TextMapPropagator
	topicName func(string) string
	m         instruments
	mu        sync.Mutex
	runs      map[string]trace.Span // run id -> its span (Agent), for Observer's SignalGiven
}

// instruments are the metrics (README.md lists them).
type instruments struct {
	published, delivered, redelivered, acked, nacked, deadLettered metric.Int64Counter
	publishDuration                                                metric.Float64Histogram

	acquires, renewals, transfers, releases, losses metric.Int64Counter

	sent, runs, takeovers, handoffs, cancels, skipped metric.Int64Counter
	queued                                            metric.Int64UpDownCounter
	sendDuration, runDuration                         metric.Float64Histogram
}

// New returns an Instrumentation with the providers of o. It returns an
// error when an instrument cannot be created.
func New(o Options) (*Instrumentation, error) {
	if o.TracerProvider == nil {
		o.TracerProvider = otel.GetTracerProvider()
	}
	if o.MeterProvider == nil {
		o.MeterProvider = otel.GetMeterProvider()
	}
	if o.Propagator == nil {
		o.Propagator = propagation.TraceContext{}
	}
	if o.MetricTopic == nil {
		o.MetricTopic = DefaultMetricTopic
	}
	in := &Instrumentation{
		tracer:    o.TracerProvider.Tracer(ScopeName),
		prop:      o.Propagator,
		topicName: o.MetricTopic,
		runs:      map[string]trace.Span{},
	}
	if err := in.m.init(o.MeterProvider.Meter(ScopeName)); err != nil {
		return nil, fmt.Errorf("leasebusotel: create instruments: %w", err)
	}
	return in, nil
}

// durationBuckets are the bucket bounds, in seconds, of the latency
// histograms: 100µs to 10s.
var durationBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

func (m *instruments) init(meter metric.Meter) error {
	var errs []error
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := meter.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	hist := func(name, desc string) metric.Float64Histogram {
		h, err := meter.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc),
			metric.WithExplicitBucketBoundaries(durationBuckets...))
		errs = append(errs, err)
		return h
	}
	m.published = counter("leasebus.events.published", "{event}", "Events stored by Publish.")
	m.delivered = counter("leasebus.events.delivered", "{delivery}", "Deliveries given to a handler, redeliveries included.")
	m.redelivered = counter("leasebus.events.redelivered", "{delivery}", "Deliveries with DeliveryAttempt above 1.")
	m.acked = counter("leasebus.events.acked", "{delivery}", "Deliveries whose handler returned nil.")
	m.nacked = counter("leasebus.events.nacked", "{delivery}", "Deliveries whose handler returned an error or panicked.")
	m.deadLettered = counter("leasebus.events.dead_lettered", "{event}", "Events whose failed attempt was their MaxDeliveries-th, their subscription not stopping: the backend moves them to <topic>.dead.")
	m.publishDuration = hist("leasebus.events.publish.duration", "Time Publish took, until the backend stored the event.")
	m.acquires = counter("leasebus.lease.acquires", "{call}", "AcquireLease calls by result: won, lost, error.")
	m.renewals = counter("leasebus.lease.renewals", "{lease}", "Lease renewals by result: renewed, refused, error (a batch counts each lease).")
	m.transfers = counter("leasebus.lease.transfers", "{call}", "TransferLease calls by result: transferred, refused, error.")
	m.releases = counter("leasebus.lease.releases", "{call}", "ReleaseLease calls by result: ok, error.")
	m.losses = counter("leasebus.lease.losses", "{lease}", "Leases of signals runs lost while held, by cause.")
	m.sent = counter("leasebus.signals.sent", "{signal}", "Signals Send accepted, by action: woke, delivered, forwarded.")
	m.runs = counter("leasebus.signals.runs", "{run}", "Agent runs started.")
	m.takeovers = counter("leasebus.signals.takeovers", "{tenure}", "Threads this process took over from a wake notice (a dead or finished owner).")
	m.handoffs = counter("leasebus.signals.handoffs", "{run}", "Runs that handed the lease to the next run with TransferLease.")
	m.cancels = counter("leasebus.signals.cancels", "{run}", "Runs whose context ended before the agent returned, by cause.")
	m.skipped = counter("leasebus.signals.skipped", "{signal}", "Duplicate signals dropped without running.")
	var err error
	m.queued, err = meter.Int64UpDownCounter("leasebus.signals.queued", metric.WithUnit("{signal}"),
		metric.WithDescription("Signals accepted by Send and not yet given to a run: +1 where Send accepts one, -1 where a run takes one; sum it over every process."))
	errs = append(errs, err)
	m.sendDuration = hist("leasebus.signals.send.duration", "Time Send took.")
	m.runDuration = hist("leasebus.signals.run.duration", "Time an agent run took (Agent wrapper), by outcome.")
	return errors.Join(errs...)
}
