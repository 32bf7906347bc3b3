// Package leasebusotel instruments leasebus with OpenTelemetry traces and
// metrics. It lives in its own module (github.com/leasebus/leasebus/otel),
// so the main module does not depend on OpenTelemetry.
//
// Create an [Instrumentation] with [New], then:
//
//   - wrap a backend with [Instrumentation.Wrap]: Publish gets a producer
//     span and carries its W3C trace context in Event.Metadata; every
//     handler gets a consumer span whose parent is that context, so one trace
//     spans a Publish and its deliveries, across processes; lease calls get
//     spans. The wrapper keeps the backend's lease capability and its optional
//     capabilities (lease.Inspector, lease.BatchRenewer,
//     signals.CrossProcessReporter), so lease.ProviderOf and signals.New find
//     them; it always has pubsub.GroupPublisher and pubsub.BatchPublisher,
//     passed on to the backend's own (without them it publishes plainly,
//     one event after the other), and a subscription is the backend's own,
//     so pubsub.Kicker is kept too; pubsub.DrainedDeleter and
//     pubsub.BacklogReader are not passed on, but the wrapper has
//     Unwrap() pubsub.PubSub, through which pubsub.As (and so the signals
//     runtime) finds them on the backend (TestWrapEndingTenureSlowRelease);
//   - give a signals runtime [Instrumentation.Observer] (signals.WithObserver)
//     for its metrics, wrap its agent with [Instrumentation.Agent] for a span
//     per run whose parent is the trace context carried in the first signal's
//     Metadata, and send with [Instrumentation.Send], which starts a span and
//     carries its context in Signal.Metadata, so one trace spans a Send and
//     the run of the signal in whichever process owns the thread.
//
// The metric names, units and attributes are listed in README.md.
//
//	in, err := leasebusotel.New(leasebusotel.Options{}) // the global providers
//	bus := in.Wrap(backend)                             // a pubsub.PubSub that is still a lease.Provider
//	rt, err := signals.New(bus, in.Agent(agent), signals.WithObserver(in.Observer(nil)))
//	acc, err := in.Send(ctx, rt, "thread-42", signals.Signal{Type: "user.message"})
package leasebusotel
