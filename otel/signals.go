package leasebusotel

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/signals"
)

// Attribute keys of signals spans and metrics.
const (
	attrThread     = attribute.Key("leasebus.signals.thread")
	attrSignalID   = attribute.Key("leasebus.signals.signal_id")
	attrSignalType = attribute.Key("leasebus.signals.signal_type")
	attrSignalIDs  = attribute.Key("leasebus.signals.signal_ids")
	attrAction     = attribute.Key("leasebus.signals.action")
	attrRunID      = attribute.Key("leasebus.signals.run_id")
	attrOwner      = attribute.Key("leasebus.signals.owner")
	attrToken      = attribute.Key("leasebus.signals.token")
	attrCause      = attribute.Key("leasebus.cause")
	attrOutcome    = attribute.Key("leasebus.outcome")
)

// Send sends sig to thread through rt in a producer span "signals send",
// whose W3C trace context it writes into a copy of sig.Metadata (the
// caller's map is not changed), so that the run of the signal, in whichever
// process owns the thread, joins the caller's trace (see Agent). It records
// leasebus.signals.send.duration by action (or error.type) and returns what
// rt.Send returned.
//
// A nil rt returns an error wrapping ErrInvalid.
func (in *Instrumentation) Send(ctx context.Context, rt *signals.Runtime, thread string, sig signals.Signal) (signals.Accepted, error) {
	if rt == nil {
		return signals.Accepted{}, errNil("runtime")
	}
	ctx, span := in.tracer.Start(ctx, "signals send", trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(attrThread.String(thread), attrSignalType.String(sig.Type)))
	md := make(map[string]string, len(sig.Metadata)+2)
	maps.Copy(md, sig.Metadata)
	in.prop.Inject(ctx, propagation.MapCarrier(md))
	sig.Metadata = md
	start := time.Now()
	acc, err := rt.Send(ctx, thread, sig)
	d := time.Since(start).Seconds()
	if err != nil {
		in.m.sendDuration.Record(ctx, d, metric.WithAttributes(attrErrorType.String(errorType(err))))
		end(span, err)
		return acc, err
	}
	in.m.sendDuration.Record(ctx, d, metric.WithAttributes(attrAction.String(acc.Action.String())))
	end(span, nil, attrSignalID.String(acc.SignalID), attrAction.String(acc.Action.String()),
		attrRunID.String(acc.RunID), attrOwner.String(acc.Owner))
	return acc, nil
}

// Agent returns agent with a span "signals run" around each run. The span's
// parent is the trace context in the Metadata of the run's first signal
// (written by Send, or by a wrapped backend's Publish), so the run joins the
// trace of the Send that woke it; the other signals the run started with are
// links, and each follow-up given by Run.Next becomes a link and an event
// when the runtime also has Observer. The agent's ctx carries the span.
// leasebus.signals.run.duration is recorded by outcome: ok, error,
// cancelled (the run's context ended first). An agent that panics (the
// panic is passed on: signals recovers it) or ends its goroutine
// (runtime.Goexit) ends its span with an error too.
//
// A nil agent gives nil, which signals.New rejects with its own ErrInvalid.
func (in *Instrumentation) Agent(agent signals.Agent) signals.Agent {
	if agent == nil {
		return nil
	}
	return func(ctx context.Context, run *signals.Run) error {
		parent := ctx
		var links []trace.Link
		ids := make([]string, 0, len(run.Signals))
		for i, s := range run.Signals {
			ids = append(ids, s.ID)
			sc := trace.SpanContextFromContext(in.prop.Extract(context.Background(), propagation.MapCarrier(s.Metadata)))
			switch {
			case !sc.IsValid():
			case i == 0:
				parent = trace.ContextWithRemoteSpanContext(ctx, sc)
			default:
				links = append(links, trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{attrSignalID.String(s.ID)}})
			}
		}
		rctx, span := in.tracer.Start(parent, "signals run", trace.WithSpanKind(trace.SpanKindConsumer), trace.WithLinks(links...),
			trace.WithAttributes(attrThread.String(run.Thread), attrRunID.String(run.ID), attrToken.Int64(int64(run.Token)),
				attrSignalIDs.StringSlice(ids)))
		in.mu.Lock()
		in.runs[run.ID] = span
		in.mu.Unlock()
		start := time.Now()
		returned := false
		defer func() {
			if returned {
				return
			}
			// The agent panicked (passed on: signals recovers it) or
			// ended its goroutine (runtime.Goexit): signals ends the run
			// with an error, so the span and the metrics do too.
			r := recover()
			err := errors.New("agent ended its goroutine (runtime.Goexit)")
			if r != nil {
				err = fmt.Errorf("panic: %v", r)
			}
			outcome := "error"
			if ctx.Err() != nil {
				outcome = "cancelled"
			}
			in.finishRun(ctx, run.ID, span, start, err, outcome)
			if r != nil {
				panic(r)
			}
		}()
		err := agent(rctx, run)
		returned = true
		outcome := "ok"
		switch {
		case err != nil && ctx.Err() != nil:
			outcome = "cancelled"
		case err != nil:
			outcome = "error"
		}
		in.finishRun(ctx, run.ID, span, start, err, outcome)
		return err
	}
}

// finishRun records the run's duration by outcome, forgets its span and
// ends it with err.
func (in *Instrumentation) finishRun(ctx context.Context, id string, span trace.Span, start time.Time, err error, outcome string) {
	in.m.runDuration.Record(ctx, time.Since(start).Seconds(), metric.WithAttributes(attrOutcome.String(outcome)))
	in.mu.Lock()
	delete(in.runs, id)
	in.mu.Unlock()
	end(span, err, attrOutcome.String(outcome))
}

// Observer returns a signals observer (signals.WithObserver) that records
// the signals metrics and then calls next, when not nil. Like every
// observer it runs synchronously on the runtime's goroutines; it only
// updates instruments.
func (in *Instrumentation) Observer(next func(signals.Event)) func(signals.Event) {
	return func(ev signals.Event) {
		in.observe(ev)
		if next != nil {
			next(ev)
		}
	}
}

func (in *Instrumentation) observe(ev signals.Event) {
	ctx := context.Background()
	m := &in.m
	switch ev.Kind {
	case signals.Sent:
		m.sent.Add(ctx, 1, metric.WithAttributes(attrAction.String(ev.Action.String())))
		m.queued.Add(ctx, int64(len(ev.Signals)))
	case signals.Recovered:
		m.takeovers.Add(ctx, 1)
	case signals.RunStarted:
		m.runs.Add(ctx, 1)
		m.queued.Add(ctx, -fresh(ev.Signals))
	case signals.SignalGiven:
		m.queued.Add(ctx, -fresh(ev.Signals))
		in.mu.Lock()
		span := in.runs[ev.RunID]
		in.mu.Unlock()
		if span != nil {
			for _, s := range ev.Signals {
				span.AddEvent("signal given", trace.WithAttributes(attrSignalID.String(s.ID), attrSignalType.String(s.Type)))
				sc := trace.SpanContextFromContext(in.prop.Extract(ctx, propagation.MapCarrier(s.Metadata)))
				if sc.IsValid() {
					span.AddLink(trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{attrSignalID.String(s.ID)}})
				}
			}
		}
	case signals.SignalSkipped:
		m.skipped.Add(ctx, 1)
		m.queued.Add(ctx, -fresh(ev.Signals))
	case signals.HandedOff:
		m.handoffs.Add(ctx, 1)
	case signals.RunEnded:
		if cause := cancelCause(ev.Err); ev.Err != nil && cause != "" {
			m.cancels.Add(ctx, 1, metric.WithAttributes(attrCause.String(cause)))
		}
	case signals.LeaseLost:
		m.losses.Add(ctx, 1, metric.WithAttributes(attrCause.String(lossCause(ev.Err))))
	}
}

// fresh returns how many of sigs are not redelivered: a redelivered signal
// was taken by an earlier run, which already counted it off the queue.
func fresh(sigs []signals.Signal) int64 {
	n := int64(0)
	for _, s := range sigs {
		if !s.Redelivered {
			n++
		}
	}
	return n
}

// cancelCause names why a run's context ended (the lease causes of
// lossCause, or "cancelled" for a plain cancellation), or returns "" when
// err is the agent's own failure.
func cancelCause(err error) string {
	switch {
	case errors.Is(err, lease.ErrNotHeld), errors.Is(err, lease.ErrRevoked), errors.Is(err, lease.ErrClosed), errors.Is(err, signals.ErrClosed):
		return lossCause(err)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "cancelled"
	}
	return ""
}

func containsAny(s string, subs ...string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}
