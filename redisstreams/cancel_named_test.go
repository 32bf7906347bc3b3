package redisstreams

// Review revC (helper 14, 2026-11-27): redisstreams/doc.go, "Clients and deadlines":
// "The single-lease calls (AcquireLease, RenewLease, ReleaseLease,
// TransferLease, GetLeaseOwner, InspectLease, LeaseState, RevokeLease,
// ForceRevokeLease), ListLeases, DeleteTopicIfDrained, Publish, PublishFor,
// PublishBatch and Subscribe's setup return when their ctx ends all the
// same, deadline or cancel, with any client". TestCancelledCallOnStalledServer
// covers TransferLease, AcquireLease and DeleteTopicIfDrained; the others
// named there had no test of their own on a stalled server.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// TestNamedCallsReturnAtCancelOnStalledServer: each call the doc
// names, on a NewURL client (go-redis defaults), the server stopped
// (SIGSTOP) before the call, its ctx cancelled (no deadline) 200ms in, and
// again with a 200ms deadline: it must return within 1s of the ctx's end
// with an error wrapping ctx's (context.Canceled, or
// context.DeadlineExceeded: DeleteTopic returned go-redis's bare i/o
// timeout in 3 of 6 runs, the client's read deadline being ctx's, until it
// wrapped ctx's error then too). GroupBacklog returned 4.8s after the cancel (go-redis's
// ReadTimeout) until it was made to return at ctx's end (the signals
// runtime's Status, lapse and watch checks read it); DeleteTopic returned
// 4.8s after the cancel, with a bare i/o timeout that did not say the
// deletion may still run, until it was made to (2026-11-27, 1ms now).
func TestNamedCallsReturnAtCancelOnStalledServer(t *testing.T) {
	redistest.Require(t)
	type call struct {
		name     string
		promised bool
		f        func(ctx context.Context, b *Backend) error
	}
	calls := []call{
		{"GetLeaseOwner", true, func(ctx context.Context, b *Backend) error { _, err := b.GetLeaseOwner(ctx, "k"); return err }},
		{"InspectLease", true, func(ctx context.Context, b *Backend) error { _, err := b.InspectLease(ctx, "k"); return err }},
		{"LeaseState", true, func(ctx context.Context, b *Backend) error { _, err := b.LeaseState(ctx, "k"); return err }},
		{"RenewLease", true, func(ctx context.Context, b *Backend) error {
			_, err := b.RenewLease(ctx, "k", "a", time.Minute)
			return err
		}},
		{"ReleaseLease", true, func(ctx context.Context, b *Backend) error { return b.ReleaseLease(ctx, "k", "a") }},
		{"RevokeLease", true, func(ctx context.Context, b *Backend) error { return b.RevokeLease(ctx, "k", "r") }},
		{"ForceRevokeLease", true, func(ctx context.Context, b *Backend) error { return b.ForceRevokeLease(ctx, "k", "r") }},
		{"ListLeases", true, func(ctx context.Context, b *Backend) error { _, err := b.ListLeases(ctx, ""); return err }},
		{"Publish", true, func(ctx context.Context, b *Backend) error {
			return b.Publish(ctx, "t", pubsub.Event{Type: "x"})
		}},
		{"PublishFor", true, func(ctx context.Context, b *Backend) error {
			return b.PublishFor(ctx, "t", "g", pubsub.Event{Type: "x"})
		}},
		{"GroupBacklog", true, func(ctx context.Context, b *Backend) error {
			_, err := b.GroupBacklog(ctx, "t", "g")
			return err
		}},
		{"DeleteTopic", true, func(ctx context.Context, b *Backend) error { return b.DeleteTopic(ctx, "t") }},
	}
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	for _, deadline := range []bool{false, true} {
		for _, tc := range calls {
			name := tc.name
			if deadline {
				name += "/deadline"
			}
			t.Run(name, func(t *testing.T) {
				b, err := NewURL(ctx, srv.URL(), Options{Prefix: psPrefix()})
				if err != nil {
					t.Fatal(err)
				}
				defer func() {
					sctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
					defer cancel()
					go b.Shutdown(sctx)
				}()
				if _, err := b.AcquireLease(ctx, "k", "a", time.Minute); err != nil {
					t.Fatal(err)
				}
				if err := b.PublishFor(ctx, "t", "g", pubsub.Event{Type: "x"}); err != nil {
					t.Fatal(err)
				}
				srv.Pause(t)
				defer srv.Resume(t)
				cctx, cancel := context.WithCancel(ctx)
				if deadline {
					cctx, cancel = context.WithTimeout(ctx, 200*time.Millisecond)
				} else {
					time.AfterFunc(200*time.Millisecond, cancel)
				}
				defer cancel()
				start := time.Now()
				err = tc.f(cctx, b)
				late := time.Since(start) - 200*time.Millisecond
				t.Logf("%s on a stopped server, ctx cancelled at 200ms: returned %v after the cancel: %v", tc.name, late.Round(time.Millisecond), err)
				if !tc.promised {
					return
				}
				if late > time.Second {
					t.Errorf("%s returned %v after its ctx was cancelled on a stopped server, want within 1s (redisstreams/doc.go)", tc.name, late.Round(time.Millisecond))
				}
				if want := context.Canceled; !deadline && !errors.Is(err, want) {
					t.Errorf("%s: error %v, want one wrapping %v", tc.name, err, want)
				}
				if want := context.DeadlineExceeded; deadline && !errors.Is(err, want) {
					t.Errorf("%s: error %v, want one wrapping %v", tc.name, err, want)
				}
			})
		}
	}
}
