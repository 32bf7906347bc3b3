package redisstreams

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/lease"
)

// TestCancelledCallOnStalledServer: a Backend from NewURL (go-redis
// defaults, reached through a proxy that only watches the bytes), the
// server stopped (SIGSTOP) while one script is on the wire, sent alone (no
// other lease call in flight, so not in a coalesced batch; AcquireLeaseSynced:
// with LeaseSyncReplicas, its script and WAIT in one pipeline); the caller's ctx
// is then cancelled, with no deadline. The call must return within 1s of
// the cancel, with an error wrapping context.Canceled that says the script
// was sent and may have run, as the batched path does. Found by review (the
// signals runtime's Close documented it as a known hole): go-redis does
// not end a blocked read when its ctx is cancelled, so the call waited for
// the client's ReadTimeout and returned its i/o timeout instead.
func TestCancelledCallOnStalledServer(t *testing.T) {
	redistest.Require(t)
	for _, tc := range []struct {
		name   string
		script *luaScript
		call   func(ctx context.Context, b *Backend) error
	}{
		{"TransferLease", transferScript, func(ctx context.Context, b *Backend) error {
			_, err := b.TransferLease(ctx, "k", "a", "b", time.Minute)
			return err
		}},
		{"AcquireLease", acquireScript, func(ctx context.Context, b *Backend) error {
			_, err := b.AcquireLease(ctx, "k", "a", time.Minute)
			return err
		}},
		{"AcquireLeaseSynced", acquireScript, func(ctx context.Context, b *Backend) error {
			_, err := b.AcquireLease(ctx, "k", "a", time.Minute)
			return err
		}},
		{"DeleteTopicIfDrained", deleteDrainedScript, func(ctx context.Context, b *Backend) error {
			_, err := b.DeleteTopicIfDrained(ctx, "t", "g")
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t, redistest.Options{})
			px := redistest.NewProxy(t, srv.Addr())
			ctx := context.Background()
			o := Options{Prefix: psPrefix()}
			if strings.HasSuffix(tc.name, "Synced") {
				// No replica: WAIT answers 0 after 50ms, so the acquire
				// below returns an error; the script is cached all the same.
				o.LeaseSyncReplicas, o.LeaseSyncTimeout = 1, 50*time.Millisecond
			}
			b, err := NewURL(ctx, "redis://"+px.Addr()+"/0", o)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = b.Close() })
			if _, err := b.AcquireLease(ctx, "k", "a", time.Minute); err != nil && o.LeaseSyncReplicas == 0 {
				t.Fatal(err)
			}
			// The proxy only watches: the script, once written, goes on to
			// the stopped server.
			written := make(chan struct{}, 1)
			px.HoldNext(func(p []byte) bool {
				if strings.Contains(string(p), tc.script.sha) {
					select {
					case written <- struct{}{}:
					default:
					}
				}
				return false
			})
			srv.Pause(t)
			t.Cleanup(func() { srv.Resume(t) })

			cctx, cancel := context.WithCancel(ctx)
			defer cancel()
			res := make(chan error, 1)
			go func() { res <- tc.call(cctx, b) }()
			select {
			case <-written:
			case err := <-res:
				t.Fatalf("returned before its script was written: %v", err)
			case <-time.After(10 * time.Second):
				t.Fatal("the script was not written within 10s")
			}
			cancel()
			cancelled := time.Now()
			err = <-res
			d := time.Since(cancelled)
			t.Logf("returned %v after the cancel: %v", d.Round(time.Millisecond), err)
			if d > time.Second {
				t.Errorf("returned %v after its ctx was cancelled, want within 1s", d.Round(time.Millisecond))
			}
			if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "may have run") {
				t.Errorf("error %v: want one wrapping context.Canceled that says the script may have run", err)
			}
		})
	}
}

// TestCancelledBeforeCallSendsNothing: a lease call or DeleteTopicIfDrained
// whose ctx was cancelled before the call sends nothing, and says so: its
// error wraps context.Canceled without the "may have run" of a script cut
// short (go-redis sends nothing on such a ctx either), and a lease call's
// matches lease.ErrNotSent. Found in review of
// the change that made these calls return when ctx ends: they started the
// sending goroutine all the same and reported a script that may have run.
func TestCancelledBeforeCallSendsNothing(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		sync  bool
		call  func(ctx context.Context, b *Backend) error
		owner string // of lease "k" afterwards: the call changed nothing
	}{
		{"AcquireLease", false, func(ctx context.Context, b *Backend) error {
			_, err := b.AcquireLease(ctx, "k", "a", time.Minute)
			return err
		}, ""},
		{"AcquireLeaseSynced", true, func(ctx context.Context, b *Backend) error {
			_, err := b.AcquireLease(ctx, "k", "a", time.Minute)
			return err
		}, ""},
		{"TransferLease", false, func(ctx context.Context, b *Backend) error {
			if _, err := b.AcquireLease(context.Background(), "k", "a", time.Minute); err != nil {
				t.Fatal(err)
			}
			_, err := b.TransferLease(ctx, "k", "a", "b", time.Minute)
			return err
		}, "a"},
		{"DeleteTopicIfDrained", false, func(ctx context.Context, b *Backend) error {
			_, err := b.DeleteTopicIfDrained(ctx, "t", "g")
			return err
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := Options{Prefix: psPrefix()}
			if tc.sync {
				o.LeaseSyncReplicas, o.LeaseSyncTimeout = 1, 50*time.Millisecond
			}
			b, err := NewURL(ctx, srv.URL(), o)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = b.Close() })
			cctx, cancel := context.WithCancel(ctx)
			cancel()
			err = tc.call(cctx, b)
			if !errors.Is(err, context.Canceled) || strings.Contains(err.Error(), "may have run") {
				t.Errorf("error %v: want one wrapping context.Canceled that does not say the script may have run", err)
			}
			if tc.name != "DeleteTopicIfDrained" && !errors.Is(err, lease.ErrNotSent) {
				t.Errorf("error %v: want one matching lease.ErrNotSent", err)
			}
			if owner, err := b.GetLeaseOwner(ctx, "k"); err != nil || owner != tc.owner {
				t.Errorf("lease k held by %q (%v) after the call, want %q", owner, err, tc.owner)
			}
		})
	}
}
