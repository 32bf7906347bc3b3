// Command stdout shows leasebus's OpenTelemetry instrumentation without a
// collector: spans and metrics are written to stdout as JSON by the SDK's
// stdout exporters.
//
// It wraps an in-process backend (inmem), publishes an event that a group
// member handles, and sends a signal to a thread whose run is traced; then it
// shuts the providers down, which writes the spans and one collection of the
// metrics. The publish and process spans share one trace; so do the signals
// send and run spans.
//
// Run it with (from the otel directory, a module of its own):
//
//	go run ./examples/stdout
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"time"

	"go.opentelemetry.io/otel/exporters/stdout/stdoutmetric"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/leasebus/leasebus/inmem"
	leasebusotel "github.com/leasebus/leasebus/otel"
	"github.com/leasebus/leasebus/pubsub"
	"github.com/leasebus/leasebus/signals"
)

func main() {
	if err := run(context.Background(), os.Stdout, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// run does the example, writing spans to traces and metrics to metrics.
func run(ctx context.Context, traces, metrics io.Writer) (err error) {
	spanExp, err := stdouttrace.New(stdouttrace.WithWriter(traces), stdouttrace.WithPrettyPrint())
	if err != nil {
		return err
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(spanExp))
	metricExp, err := stdoutmetric.New(stdoutmetric.WithWriter(metrics), stdoutmetric.WithPrettyPrint())
	if err != nil {
		return err
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewPeriodicReader(metricExp, sdkmetric.WithInterval(time.Hour))))
	defer func() { // writes the spans, then the metrics
		err = errors.Join(err, tp.Shutdown(ctx), mp.Shutdown(ctx))
	}()

	in, err := leasebusotel.New(leasebusotel.Options{TracerProvider: tp, MeterProvider: mp})
	if err != nil {
		return err
	}
	backend := inmem.New()
	bus := in.Wrap(backend) // still a lease.Provider: signals finds the lease capability
	defer bus.Close()

	// Events: one publish, handled by a member of group "billing".
	handled := make(chan struct{})
	sub, err := bus.Subscribe(ctx, "orders", func(ctx context.Context, e pubsub.Event) error {
		close(handled)
		return nil
	}, pubsub.Group("billing"))
	if err != nil {
		return err
	}
	defer sub.Unsubscribe(ctx)
	if err := bus.Publish(ctx, "orders", pubsub.Event{Type: "order.created", Data: []byte(`{"id":1}`)}); err != nil {
		return err
	}
	<-handled

	// Signals: one Send, whose run joins the sender's trace.
	ran := make(chan struct{})
	agent := func(ctx context.Context, run *signals.Run) error {
		close(ran)
		return nil
	}
	rt, err := signals.New(bus, in.Agent(agent), signals.WithObserver(in.Observer(nil)))
	if err != nil {
		return err
	}
	defer rt.Close(ctx)
	acc, err := in.Send(ctx, rt, "thread-1", signals.Signal{Type: "user.message", Data: []byte(`"hi"`)})
	if err != nil {
		return err
	}
	<-ran
	fmt.Fprintf(os.Stderr, "sent a signal to thread-1 (%s); spans and metrics follow on stdout\n", acc.Action)
	return nil
}
