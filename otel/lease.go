package leasebusotel

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/pubsub"
	"github.com/leasebus/leasebus/signals"
)

// Span attribute keys of lease calls.
const (
	attrLeaseKey   = attribute.Key("leasebus.lease.key")
	attrLeaseOwner = attribute.Key("leasebus.lease.owner")
	attrLeaseTo    = attribute.Key("leasebus.lease.to_owner")
	attrLeaseTTL   = attribute.Key("leasebus.lease.ttl_ms")
	attrLeaseToken = attribute.Key("leasebus.lease.token")
	attrHolder     = attribute.Key("leasebus.lease.holder")
	attrResult     = attribute.Key("leasebus.result")
	attrBatch      = attribute.Key("leasebus.lease.batch_size")
)

// Wrap returns backend with traces and metrics (see the package doc). The
// result implements pubsub.PubSub and, exactly when backend does, the
// five lease.Provider methods (so lease.ProviderOf and signals.New find the
// capability, and use the instrumented calls) with
// lease.TokenTransferer (see leases.TransferLeaseToken: on a provider
// without it, by TransferLease and AcquireLease), lease.TokenReleaser (see
// leases.ReleaseLeaseToken), lease.Inspector,
// lease.BatchRenewer and signals.CrossProcessReporter. Other methods of the
// backend are reached through the result's Unwrap() pubsub.PubSub method.
// Wrap does not take over the backend: closing the result closes it.
//
// A nil backend gives a PubSub whose every call returns an error wrapping
// ErrInvalid.
func (in *Instrumentation) Wrap(backend pubsub.PubSub) pubsub.PubSub {
	if backend == nil {
		return invalidBus{}
	}
	b := &bus{in: in, inner: backend}
	xp, isXP := backend.(signals.CrossProcessReporter)
	p, ok := lease.ProviderOf(backend)
	if !ok {
		if isXP {
			return &busX{b, xp}
		}
		return b
	}
	l := &leases{in: in, inner: p}
	insp, isI := backend.(lease.Inspector)
	br, isB := backend.(lease.BatchRenewer)
	bb := &batch{l: l, inner: br}
	switch {
	case isI && isB && isXP:
		return &busLIBX{b, l, insp, bb, xp}
	case isI && isB:
		return &busLIB{b, l, insp, bb}
	case isI && isXP:
		return &busLIX{b, l, insp, xp}
	case isB && isXP:
		return &busLBX{b, l, bb, xp}
	case isI:
		return &busLI{b, l, insp}
	case isB:
		return &busLB{b, l, bb}
	case isXP:
		return &busLX{b, l, xp}
	}
	return &busL{b, l}
}

// WrapProvider returns p with a span and metrics per lease call. The result
// implements lease.TokenTransferer and lease.TokenReleaser (as Wrap's
// does), and lease.Inspector
// and lease.BatchRenewer exactly when p does. A
// nil p gives a Provider whose every call returns an error wrapping
// ErrInvalid.
func (in *Instrumentation) WrapProvider(p lease.Provider) lease.Provider {
	if p == nil {
		return invalidProvider{}
	}
	l := &leases{in: in, inner: p}
	insp, isI := p.(lease.Inspector)
	br, isB := p.(lease.BatchRenewer)
	bb := &batch{l: l, inner: br}
	switch {
	case isI && isB:
		return &provIB{l, insp, bb}
	case isI:
		return &provI{l, insp}
	case isB:
		return &provB{l, bb}
	}
	return l
}

// The combinations of capabilities Wrap and WrapProvider return: a Go type
// has a method or not, so each set of optional capabilities is its own
// type. b: pubsub, l: lease.Provider, I: lease.Inspector, B:
// lease.BatchRenewer, X: signals.CrossProcessReporter.
type (
	busX struct {
		*bus
		signals.CrossProcessReporter
	}
	busL struct {
		*bus
		*leases
	}
	busLI struct {
		*bus
		*leases
		lease.Inspector
	}
	busLB struct {
		*bus
		*leases
		*batch
	}
	busLX struct {
		*bus
		*leases
		signals.CrossProcessReporter
	}
	busLIB struct {
		*bus
		*leases
		lease.Inspector
		*batch
	}
	busLIX struct {
		*bus
		*leases
		lease.Inspector
		signals.CrossProcessReporter
	}
	busLBX struct {
		*bus
		*leases
		*batch
		signals.CrossProcessReporter
	}
	busLIBX struct {
		*bus
		*leases
		lease.Inspector
		*batch
		signals.CrossProcessReporter
	}
	provI struct {
		*leases
		lease.Inspector
	}
	provB struct {
		*leases
		*batch
	}
	provIB struct {
		*leases
		lease.Inspector
		*batch
	}
)

// leases is a lease.Provider with a span and metrics per call.
type leases struct {
	in    *Instrumentation
	inner lease.Provider
}

// start starts the span of a lease call.
func (l *leases) start(ctx context.Context, op, key, owner string, ttl time.Duration) (context.Context, trace.Span) {
	attrs := []attribute.KeyValue{attrLeaseKey.String(key), attrLeaseOwner.String(owner)}
	if ttl > 0 {
		attrs = append(attrs, attrLeaseTTL.Int64(ttl.Milliseconds()))
	}
	return l.in.tracer.Start(ctx, "lease "+op, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
}

// end ends span, with err as its error.
func end(span trace.Span, err error, attrs ...attribute.KeyValue) {
	span.SetAttributes(attrs...)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// AcquireLease acquires through the wrapped provider in a span "lease
// acquire" and counts leasebus.lease.acquires by result.
func (l *leases) AcquireLease(ctx context.Context, key, owner string, ttl time.Duration) (lease.Result, error) {
	ctx, span := l.start(ctx, "acquire", key, owner, ttl)
	r, err := l.inner.AcquireLease(ctx, key, owner, ttl)
	result := "won"
	switch {
	case err != nil:
		result = "error"
	case !r.Acquired:
		result = "lost"
		span.SetAttributes(attrHolder.String(r.Owner))
	}
	l.in.m.acquires.Add(ctx, 1, metric.WithAttributes(attrResult.String(result)))
	end(span, err, attrResult.String(result), attrLeaseToken.Int64(int64(r.Token)))
	return r, err
}

// GetLeaseOwner calls the wrapped provider (no span: it changes nothing).
func (l *leases) GetLeaseOwner(ctx context.Context, key string) (string, error) {
	return l.inner.GetLeaseOwner(ctx, key)
}

// ReleaseLease releases through the wrapped provider in a span "lease
// release" and counts leasebus.lease.releases.
func (l *leases) ReleaseLease(ctx context.Context, key, owner string) error {
	ctx, span := l.start(ctx, "release", key, owner, 0)
	err := l.inner.ReleaseLease(ctx, key, owner)
	result := "ok"
	if err != nil {
		result = "error"
	}
	l.in.m.releases.Add(ctx, 1, metric.WithAttributes(attrResult.String(result)))
	end(span, err, attrResult.String(result))
	return err
}

// ReleaseLeaseToken releases one tenure through the wrapped provider's
// ReleaseLeaseToken (lease.TokenReleaser, which lease.Held.Release uses),
// in a span "lease release", counted as ReleaseLease counts; on a provider
// without it, by ReleaseLease, which releases whatever tenure owner holds
// (as lease.Held.Release would without this method).
func (l *leases) ReleaseLeaseToken(ctx context.Context, key, owner string, token uint64) error {
	tr, ok := l.inner.(lease.TokenReleaser)
	if !ok {
		return l.ReleaseLease(ctx, key, owner)
	}
	ctx, span := l.start(ctx, "release", key, owner, 0)
	err := tr.ReleaseLeaseToken(ctx, key, owner, token)
	result := "ok"
	if err != nil {
		result = "error"
	}
	l.in.m.releases.Add(ctx, 1, metric.WithAttributes(attrResult.String(result)))
	end(span, err, attrResult.String(result))
	return err
}

// RenewLease renews through the wrapped provider in a span "lease renew"
// and counts leasebus.lease.renewals by result.
func (l *leases) RenewLease(ctx context.Context, key, owner string, ttl time.Duration) (bool, error) {
	ctx, span := l.start(ctx, "renew", key, owner, ttl)
	ok, err := l.inner.RenewLease(ctx, key, owner, ttl)
	result := renewResult(ok, err)
	l.in.m.renewals.Add(ctx, 1, metric.WithAttributes(attrResult.String(result)))
	end(span, err, attrResult.String(result))
	return ok, err
}

// TransferLease transfers through the wrapped provider in a span "lease
// transfer" and counts leasebus.lease.transfers by result.
func (l *leases) TransferLease(ctx context.Context, key, from, to string, ttl time.Duration) (bool, error) {
	ctx, span := l.start(ctx, "transfer", key, from, ttl)
	span.SetAttributes(attrLeaseTo.String(to))
	ok, err := l.inner.TransferLease(ctx, key, from, to, ttl)
	result := "transferred"
	switch {
	case err != nil:
		result = "error"
	case !ok:
		result = "refused"
	}
	l.in.m.transfers.Add(ctx, 1, metric.WithAttributes(attrResult.String(result)))
	end(span, err, attrResult.String(result))
	return ok, err
}

// TransferLeaseToken transfers through the wrapped provider in a span
// "lease transfer", as TransferLease does, and returns the new owner's
// fencing token (lease.TokenTransferer): in one call when the provider is
// a lease.TokenTransferer itself (so a lease.Held's hand-off, which the
// signals runtime makes at every run with signals queued behind it, costs
// one script through the wrapper as on the bare backend; before the
// wrapper had this method it cost a transfer and an acquire), otherwise by
// TransferLease and then AcquireLease by toOwner, which re-acquires the
// tenure just transferred and reports its token, as lease.Keeper does for
// such a provider. It returns 0 and nil when the transfer was refused,
// and an error wrapping lease.ErrNotHeld when the lease was lost between
// the two calls of the second way; a token read that failed otherwise
// gives an error that never matches lease.ErrNotSent or lease.ErrClosed
// (the transfer ran: transferRan).
func (l *leases) TransferLeaseToken(ctx context.Context, key, from, to string, ttl time.Duration) (uint64, error) {
	ctx, span := l.start(ctx, "transfer", key, from, ttl)
	span.SetAttributes(attrLeaseTo.String(to))
	var (
		tok uint64
		err error
	)
	if tt, ok := l.inner.(lease.TokenTransferer); ok {
		tok, err = tt.TransferLeaseToken(ctx, key, from, to, ttl)
	} else {
		var ok bool
		ok, err = l.inner.TransferLease(ctx, key, from, to, ttl)
		if err == nil && ok {
			var r lease.Result
			r, err = l.inner.AcquireLease(ctx, key, to, ttl)
			switch {
			case err != nil:
				err = fmt.Errorf("leasebusotel: %q transferred to %s, but reading its token failed (it stays with %s until it expires): %w", key, to, to, transferRan(err))
			case !r.Acquired:
				err = fmt.Errorf("%w: lease %q lost right after its transfer to %s: %w", lease.ErrNotHeld, key, to, lease.NewHeldError(key, r))
			default:
				tok = r.Token
			}
		}
	}
	result := "transferred"
	switch {
	case err != nil:
		result = "error"
	case tok == 0:
		result = "refused"
	default:
		span.SetAttributes(attrLeaseToken.Int64(int64(tok)))
	}
	l.in.m.transfers.Add(ctx, 1, metric.WithAttributes(attrResult.String(result)))
	end(span, err, attrResult.String(result))
	return tok, err
}

// transferRan returns err, the error of the token read after a transfer
// that ran, as text only when it matches lease.ErrNotSent or
// lease.ErrClosed: the error TransferLeaseToken returns must not say the
// call did not run, since lease.Held.Transfer keeps its Held live on those
// two (TestReviewH73WrappedTransferReadNotSent: the Held reported the lease
// live while the new owner held it).
func transferRan(err error) error {
	if errors.Is(err, lease.ErrNotSent) || errors.Is(err, lease.ErrClosed) {
		return errors.New(err.Error())
	}
	return err
}

func renewResult(ok bool, err error) string {
	switch {
	case err != nil:
		return "error"
	case !ok:
		return "refused"
	}
	return "renewed"
}

// batch is the instrumented lease.BatchRenewer of a wrapped provider.
type batch struct {
	l     *leases
	inner lease.BatchRenewer
}

// RenewLeases renews the batch through the wrapped provider in one span
// "lease renew_batch" and counts leasebus.lease.renewals per lease.
func (b *batch) RenewLeases(ctx context.Context, reqs []lease.Renewal) ([]bool, error) {
	ctx, span := b.l.in.tracer.Start(ctx, "lease renew_batch", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attrBatch.Int(len(reqs))))
	oks, err := b.inner.RenewLeases(ctx, reqs)
	counts := map[string]int64{}
	if err != nil {
		counts["error"] = int64(len(reqs))
	} else {
		for _, ok := range oks {
			counts[renewResult(ok, nil)]++
		}
	}
	for result, n := range counts {
		b.l.in.m.renewals.Add(ctx, n, metric.WithAttributes(attrResult.String(result)))
	}
	end(span, err, attribute.Int64("leasebus.lease.refused", counts["refused"]))
	return oks, err
}

// lossCause names why a held lease ended, for leasebus.lease.losses and
// leasebus.signals.cancels: revoked (an operator revoked it), refused (a
// renewal was refused: it expired or was taken), renew_failed (renewals
// kept failing until the lease could expire), closed (the Keeper or the
// runtime closed), lost (anything else the lease package reports as
// ErrNotHeld). The lease package tells refused and renew_failed apart only in
// its message, which is what this reads.
func lossCause(err error) string {
	switch {
	case errors.Is(err, lease.ErrRevoked):
		return "revoked"
	case errors.Is(err, lease.ErrClosed), errors.Is(err, signals.ErrClosed):
		return "closed"
	case containsAny(err.Error(), "renewal refused"):
		return "refused"
	case containsAny(err.Error(), "gave up before expiry", "renew:"):
		return "renew_failed"
	}
	return "lost"
}
