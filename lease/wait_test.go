package lease_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasebus/leasebus/lease"
)

func TestWaitAcquiresAfterRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		b := bubbleBackend(t)
		if _, err := b.AcquireLease(ctx, "k", "x", time.Hour); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		defer wg.Wait()
		wg.Go(func() {
			time.Sleep(5 * time.Second)
			b.ReleaseLease(ctx, "k", "x")
		})
		start := time.Now()
		r, err := lease.Wait(ctx, b, "k", "a", ttl, lease.Backoff{})
		if err != nil || !r.Acquired || r.Owner != "a" || r.Token != 2 {
			t.Fatalf("Wait = %+v, %v; want acquired by a with token 2", r, err)
		}
		if d := time.Since(start); d < 5*time.Second || d > 5*time.Second+lease.DefaultBackoffMax {
			t.Fatalf("Wait took %v, want 5s plus at most one backoff", d)
		}
	})
}

func TestWaitSleepsNoLongerThanTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		b := bubbleBackend(t)
		if _, err := b.AcquireLease(ctx, "k", "x", 3*time.Second); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		r, err := lease.Wait(ctx, b, "k", "a", ttl, lease.Backoff{Min: time.Minute, Max: time.Hour})
		if err != nil || !r.Acquired {
			t.Fatalf("Wait = %+v, %v", r, err)
		}
		if d := time.Since(start); d < 3*time.Second || d > 3*time.Second+50*time.Millisecond {
			t.Fatalf("Wait took %v, want just over the holder's 3s", d)
		}
	})
}

func TestWaitBacksOffExponentially(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		b := bubbleBackend(t)
		if _, err := b.AcquireLease(ctx, "k", "x", time.Hour); err != nil {
			t.Fatal(err)
		}
		f := &flaky{Provider: b}
		counter := &countAcquires{Provider: f}
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		r, err := lease.Wait(ctx, counter, "k", "a", ttl, lease.Backoff{})
		// Delays 0.5–1s, 1–2s, 2–4s, 4–8s, then 5–10s each.
		if n := counter.n; n < 8 || n > 16 {
			t.Fatalf("%d attempts in a minute, want 8..16 for 1s..10s backoff", n)
		}
		var he *lease.HeldError
		if !errors.Is(err, lease.ErrHeld) || !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &he) || he.Owner != "x" {
			t.Fatalf("Wait error = %v, want HeldError naming x joined with DeadlineExceeded", err)
		}
		if r.Acquired || r.Owner != "x" {
			t.Fatalf("Wait result = %+v, want the last attempt, lost to x", r)
		}
	})
}

type countAcquires struct {
	lease.Provider
	n int
}

func (c *countAcquires) AcquireLease(ctx context.Context, key, owner string, ttl time.Duration) (lease.Result, error) {
	c.n++ // Wait calls it from one goroutine
	return c.Provider.AcquireLease(ctx, key, owner, ttl)
}

func TestWaitRetriesTransportErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		b := bubbleBackend(t)
		f := &flaky{Provider: b, failAcquire: 3}
		r, err := lease.Wait(ctx, f, "k", "a", ttl, lease.Backoff{Min: time.Second, Max: 2 * time.Second})
		if err != nil || !r.Acquired {
			t.Fatalf("Wait = %+v, %v; want acquired after 3 failures", r, err)
		}

		f = &flaky{Provider: b, failAcquire: 1 << 30}
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err = lease.Wait(ctx, f, "k2", "a", ttl, lease.Backoff{})
		if !errors.Is(err, errFlaky) || !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, lease.ErrHeld) {
			t.Fatalf("Wait error = %v, want the transport error joined with DeadlineExceeded", err)
		}
	})
}

func TestWaitErrors(t *testing.T) {
	ctx := t.Context()
	b := newBackend(t)
	for _, tc := range []struct {
		name, field string
		key         string
		ttl         time.Duration
		b           lease.Backoff
	}{
		{"NegativeMin", "Min", "k", ttl, lease.Backoff{Min: -1}},
		{"NegativeMax", "Max", "k", ttl, lease.Backoff{Max: -1}},
		{"MinAboveMax", "Min", "k", ttl, lease.Backoff{Min: 2 * time.Second, Max: time.Second}},
		{"EmptyKey", "key", "", ttl, lease.Backoff{}},
		{"ZeroTTL", "ttl", "k", 0, lease.Backoff{}},
	} {
		if _, err := lease.Wait(ctx, b, tc.key, "a", tc.ttl, tc.b); !errors.Is(err, lease.ErrInvalid) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: %v, want ErrInvalid naming %s", tc.name, err, tc.field)
		}
	}
	// Min alone above the default Max is valid: Max follows it.
	if r, err := lease.Wait(ctx, b, "k", "a", ttl, lease.Backoff{Min: time.Minute}); err != nil || !r.Acquired {
		t.Fatalf("Wait with Min 1m = %+v, %v", r, err)
	}
	b.Close()
	if _, err := lease.Wait(ctx, b, "k", "a", ttl, lease.Backoff{}); !errors.Is(err, lease.ErrClosed) {
		t.Fatalf("Wait on a closed backend = %v, want ErrClosed at once", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := lease.Wait(cctx, newBackend(t), "k", "a", ttl, lease.Backoff{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait with a done ctx = %v, want context.Canceled", err)
	}
}
