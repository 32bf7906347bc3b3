package redisstreams

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/lease"
)

// TestReviewH70LeaseHelpersReturnAtCtx: lease.Wait, Keeper.Keep,
// Held.Release and Held.Transfer on a black-holed server, with NewURL's
// client and with go-redis's defaults (New), return within 1s of their
// ctx's deadline, with an error naming the key.
func TestReviewH70LeaseHelpersReturnAtCtx(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	for _, name := range []string{"NewURL", "Default"} {
		t.Run(name, func(t *testing.T) {
			proxy := redistest.NewProxy(t, srv.Addr())
			var b *Backend
			var err error
			if name == "NewURL" {
				b, err = NewURL(t.Context(), "redis://"+proxy.Addr()+"/0", Options{Prefix: "h70w"})
			} else {
				c := redis.NewClient(&redis.Options{Addr: proxy.Addr()})
				t.Cleanup(func() { c.Close() })
				b, err = New(c, Options{Prefix: "h70w"})
			}
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			k := lease.NewKeeper(b, lease.KeeperOptions{})
			t.Cleanup(func() { k.Close() })
			h1, err := k.Keep(t.Context(), "held1", "a", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			h2, err := k.Keep(t.Context(), "held2", "a", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			proxy.BlackHole()
			t.Cleanup(proxy.Restore)
			check := func(what, key string, f func(ctx context.Context) error) {
				ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
				defer cancel()
				start := time.Now()
				err := f(ctx)
				took := time.Since(start)
				if took > 1500*time.Millisecond {
					t.Errorf("%s returned after %v (ctx 500ms)", what, took)
				}
				if err == nil {
					t.Errorf("%s on a black-holed server returned nil", what)
				} else if !strings.Contains(err.Error(), key) {
					t.Errorf("%s error does not name the key %q: %v", what, key, err)
				}
				t.Logf("%s: %v after %v", what, err, took.Round(time.Millisecond))
			}
			check("lease.Wait", "w", func(ctx context.Context) error {
				_, err := lease.Wait(ctx, b, "w", "a", time.Minute, lease.Backoff{Min: 10 * time.Millisecond})
				return err
			})
			check("Keeper.Keep", "kk", func(ctx context.Context) error {
				_, err := k.Keep(ctx, "kk", "a", time.Minute)
				return err
			})
			check("Held.Release", "held1", func(ctx context.Context) error { return h1.Release(ctx) })
			check("Held.Transfer", "held2", func(ctx context.Context) error {
				_, err := h2.Transfer(ctx, "b")
				return err
			})
		})
	}
}
