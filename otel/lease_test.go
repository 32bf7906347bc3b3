package leasebusotel_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/leasebus/leasebus/inmem"
	"github.com/leasebus/leasebus/lease"
	leasebusotel "github.com/leasebus/leasebus/otel"
	"github.com/leasebus/leasebus/pubsub"
	"github.com/leasebus/leasebus/signals"
)

// Backends with each set of capabilities, built from an inmem Backend.
type (
	onlyPubSub struct{ pubsub.PubSub }
	local      struct{ pubsub.PubSub } // reports CrossProcess() false
	withLease  struct {
		pubsub.PubSub
		lease.Provider
	}
	withLeaseLocal struct {
		pubsub.PubSub
		lease.Provider
	}
	withInspector struct {
		pubsub.PubSub
		lease.Provider
		lease.Inspector
	}
	withBatch struct {
		pubsub.PubSub
		lease.Provider
		lease.BatchRenewer
	}
	withAllLocal struct {
		pubsub.PubSub
		lease.Provider
		lease.Inspector
		lease.BatchRenewer
	}
)

func (local) CrossProcess() bool          { return false }
func (withLeaseLocal) CrossProcess() bool { return false }
func (withAllLocal) CrossProcess() bool   { return false }

// caps lists the capabilities v has.
func caps(v any) [4]bool {
	_, p := lease.ProviderOf(v)
	_, i := v.(lease.Inspector)
	_, b := v.(lease.BatchRenewer)
	_, x := v.(signals.CrossProcessReporter)
	return [4]bool{p, i, b, x}
}

// TestWrapKeepsCapabilities: the wrapper of a backend has exactly the
// capabilities of the backend: lease.ProviderOf finds a lease provider
// exactly when the backend is one, and Inspector, BatchRenewer and
// CrossProcessReporter are kept.
func TestWrapKeepsCapabilities(t *testing.T) {
	tm := newTelemetry(t)
	b := inmem.New()
	defer b.Close()
	for name, backend := range map[string]pubsub.PubSub{
		"inmem":          b,
		"pubsub only":    onlyPubSub{b},
		"local":          local{b},
		"lease":          withLease{b, b},
		"lease, local":   withLeaseLocal{b, b},
		"inspector":      withInspector{b, b, b},
		"batch":          withBatch{b, b, b},
		"all":            withAllLocal{b, b, b, b},
		"inmem, wrapped": tm.in.Wrap(b), // wrapping twice keeps them too
	} {
		w := tm.in.Wrap(backend)
		if got, want := caps(w), caps(backend); got != want {
			t.Errorf("%s: wrapped has [provider inspector batch crossprocess] %v, the backend %v", name, got, want)
		}
		if u, ok := w.(interface{ Unwrap() pubsub.PubSub }); !ok || u.Unwrap() != backend {
			t.Errorf("%s: Unwrap does not return the backend", name)
		}
	}
	if x := tm.in.Wrap(local{b}).(signals.CrossProcessReporter); x.CrossProcess() {
		t.Error("CrossProcess() of the wrapper of a local backend is true")
	}
	for name, p := range map[string]lease.Provider{"inmem": b, "lease": withLease{b, b}, "inspector": withInspector{b, b, b}, "batch": withBatch{b, b, b}} {
		if got, want := caps(tm.in.WrapProvider(p)), caps(p); got != want {
			t.Errorf("WrapProvider(%s): %v, want %v", name, got, want)
		}
	}
}

// TestSignalsRuntimeFindsWrappedLeases: the signals runtime on a wrapped
// backend finds its lease capability (its runs carry real fencing tokens,
// not lease.Noop's 0) and leases through the wrapper (the acquire,
// transfer and release spans and metrics come from the runtime's calls).
func TestSignalsRuntimeFindsWrappedLeases(t *testing.T) {
	tm := newTelemetry(t)
	b := inmem.New()
	defer b.Close()
	tokens := make(chan uint64, 10)
	release := make(chan struct{})
	agent := func(ctx context.Context, run *signals.Run) error {
		if run.Signals[0].ID == "s1" {
			<-release // s2 queues behind this run: a hand-off follows
		}
		tokens <- run.Token
		return nil
	}
	rt, err := signals.New(tm.in.Wrap(b), tm.in.Agent(agent), signals.WithObserver(tm.in.Observer(nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, id := range []string{"s1", "s2"} {
		if _, err := tm.in.Send(ctx, rt, "t1", signals.Signal{ID: id, Type: "x"}); err != nil {
			t.Fatal(err)
		}
	}
	close(release)
	for range 2 {
		if tok := <-tokens; tok == 0 {
			t.Errorf("a run has token 0: the runtime fell back to lease.Noop")
		}
	}
	if err := rt.Close(ctx); err != nil {
		t.Fatal(err)
	}
	tm.span(t, "lease acquire")
	tm.span(t, "lease transfer")
	tm.span(t, "lease release")
	// The Send's acquire, the hand-off and the done records' updates
	// (transfers), the release: at least one of each.
	for _, name := range []string{"leasebus.lease.acquires", "leasebus.lease.transfers", "leasebus.lease.releases"} {
		if n := tm.sum(t, name); n < 1 {
			t.Errorf("%s = %d, want at least 1", name, n)
		}
	}
	for name, want := range map[string]int64{
		"leasebus.signals.runs":     2,
		"leasebus.signals.handoffs": 1,
		"leasebus.signals.queued":   0, // both sent, both taken
		"leasebus.signals.sent":     2,
	} {
		if n := tm.sum(t, name); n != want {
			t.Errorf("%s = %d, want %d", name, n, want)
		}
	}
	if n := tm.sum(t, "leasebus.lease.acquires", attribute.String("leasebus.result", "won")); n < 1 {
		t.Errorf("acquires won = %d, want at least 1", n)
	}
	if n := tm.sum(t, "leasebus.signals.sent", attribute.String("leasebus.signals.action", "woke")); n != 1 {
		t.Errorf("sent woke = %d, want 1", n)
	}
	if n := tm.sum(t, "leasebus.signals.run.duration", attribute.String("leasebus.outcome", "ok")); n != 2 {
		t.Errorf("run.duration ok recordings = %d, want 2", n)
	}
}

// TestLeaseMetrics: acquires won and lost, renewals by Keep (batched through
// the wrapper's BatchRenewer), and a lease lost under a signals run (its
// renewal refused) counted with its cause, and the run counted as cancelled.
func TestLeaseMetrics(t *testing.T) {
	tm := newTelemetry(t)
	b := inmem.New()
	defer b.Close()
	w := tm.in.Wrap(b)
	p, _ := lease.ProviderOf(w)
	ctx := context.Background()
	h, err := lease.Keep(ctx, p, "k", "a", 150*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lease.Keep(ctx, p, "k", "b", time.Second); err == nil {
		t.Fatal("b acquired a held lease")
	}
	deadline := time.Now().Add(10 * time.Second)
	for tm.sum(t, "leasebus.lease.renewals", attribute.String("leasebus.result", "renewed")) < 2 {
		if time.Now().After(deadline) {
			t.Fatal("no renewals counted within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for result, want := range map[string]int64{"won": 1, "lost": 1} {
		if n := tm.sum(t, "leasebus.lease.acquires", attribute.String("leasebus.result", result)); n != want {
			t.Errorf("acquires %s = %d, want %d", result, n, want)
		}
	}
	tm.waitSpan(t, "lease renew_batch")

	// A run whose lease is taken away: its renewal is refused.
	started := make(chan *signals.Run, 1)
	rt, err := signals.New(w, tm.in.Agent(func(ctx context.Context, run *signals.Run) error {
		select {
		case started <- run:
		default: // the signal's next run, after the loss
		}
		<-ctx.Done()
		return ctx.Err()
	}), signals.WithObserver(tm.in.Observer(nil)), signals.WithLeaseTTL(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { // cancels the signal's next run, which waits for that
		cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		_ = rt.Close(cctx)
	}()
	if _, err := rt.Send(ctx, "t2", signals.Signal{ID: "x", Type: "x"}); err != nil {
		t.Fatal(err)
	}
	run := <-started
	if err := b.ReleaseLease(ctx, signals.LeaseKey("t2"), run.Owner); err != nil { // behind the wrapper's back
		t.Fatal(err)
	}
	for tm.sum(t, "leasebus.signals.cancels") == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the run was not cancelled within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := tm.sum(t, "leasebus.lease.losses", attribute.String("leasebus.cause", "refused")); n != 1 {
		t.Errorf("losses refused = %d, want 1", n)
	}
	if n := tm.sum(t, "leasebus.signals.cancels", attribute.String("leasebus.cause", "refused")); n != 1 {
		t.Errorf("cancels refused = %d, want 1", n)
	}
	if n := tm.sum(t, "leasebus.lease.renewals", attribute.String("leasebus.result", "refused")); n < 1 {
		t.Errorf("renewals refused = %d, want at least 1", n)
	}
}

// TestNilInputs: nil values give errors wrapping ErrInvalid (or nil, which
// the callee rejects), never a panic.
func TestNilInputs(t *testing.T) {
	tm := newTelemetry(t)
	ctx := context.Background()
	w := tm.in.Wrap(nil)
	if err := w.Publish(ctx, "t", pubsub.Event{Type: "x"}); !errors.Is(err, leasebusotel.ErrInvalid) {
		t.Errorf("Publish on Wrap(nil): %v, want ErrInvalid", err)
	}
	if _, err := tm.in.WrapProvider(nil).AcquireLease(ctx, "k", "o", time.Second); !errors.Is(err, leasebusotel.ErrInvalid) {
		t.Errorf("AcquireLease on WrapProvider(nil): %v, want ErrInvalid", err)
	}
	if _, err := tm.in.Send(ctx, nil, "t", signals.Signal{Type: "x"}); !errors.Is(err, leasebusotel.ErrInvalid) {
		t.Errorf("Send with a nil runtime: %v, want ErrInvalid", err)
	}
	b := inmem.New()
	defer b.Close()
	if _, err := signals.New(b, tm.in.Agent(nil)); !errors.Is(err, signals.ErrInvalid) {
		t.Errorf("signals.New with Agent(nil): %v, want signals.ErrInvalid", err)
	}
}
