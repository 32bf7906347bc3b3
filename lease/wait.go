package lease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasebus/leasebus/internal/backoff"
)

// Defaults of Backoff, as in the seeds: takeover attempts back off from 1s to
// 10s, jittered, so that many waiters do not stampede an expiring lease.
const (
	// DefaultBackoffMin is the first delay when Backoff.Min is zero.
	DefaultBackoffMin = time.Second
	// DefaultBackoffMax is the longest delay when Backoff.Max is zero (or
	// Min, when Min is longer).
	DefaultBackoffMax = 10 * time.Second
)

// waitSlack is added to a holder's remaining TTL when Wait caps its sleep at
// it, so that the next attempt comes just after the lease expires.
const waitSlack = 10 * time.Millisecond

// Backoff is the delay policy of Wait: the n-th delay (from 0) is
// Min·2ⁿ capped at Max, then jittered to a random point in its upper half.
// The zero value means DefaultBackoffMin..DefaultBackoffMax. A zero Min means
// DefaultBackoffMin (or Max, when Max is shorter); a zero Max means the
// larger of DefaultBackoffMax and Min. Negative values, values below 1ms
// (other than zero), or a Min above a non-zero Max, are invalid
// (ErrInvalid, naming the field).
type Backoff struct {
	Min, Max time.Duration
}

func (b Backoff) bounds() (lo, hi time.Duration, err error) {
	switch {
	case b.Min < 0:
		return 0, 0, fmt.Errorf("%w: backoff Min %v is negative", ErrInvalid, b.Min)
	case b.Max < 0:
		return 0, 0, fmt.Errorf("%w: backoff Max %v is negative", ErrInvalid, b.Max)
	case b.Max > 0 && b.Min > b.Max:
		return 0, 0, fmt.Errorf("%w: backoff Min %v is above Max %v", ErrInvalid, b.Min, b.Max)
	case b.Min > 0 && b.Min < time.Millisecond:
		return 0, 0, fmt.Errorf("%w: backoff Min %v is below 1ms (Wait would hammer the provider)", ErrInvalid, b.Min)
	case b.Max > 0 && b.Max < time.Millisecond:
		return 0, 0, fmt.Errorf("%w: backoff Max %v is below 1ms (Wait would hammer the provider)", ErrInvalid, b.Max)
	}
	lo, hi = b.Min, b.Max
	if lo == 0 {
		lo = DefaultBackoffMin
		if hi > 0 && hi < lo {
			lo = hi
		}
	}
	if hi == 0 {
		hi = max(DefaultBackoffMax, lo)
	}
	return lo, hi, nil
}

// Wait blocks until it acquires key for owner for ttl, trying AcquireLease
// again after each lost attempt with jittered exponential backoff (see
// [Backoff]). It never sleeps much longer than the holder's remaining TTL,
// so it tries again just after the lease could expire.
//
// It returns the winning Result. Transport errors are retried with the same
// backoff, since they may be transient; errors wrapping ErrInvalid (bad
// input, including an invalid Backoff, naming the field) or ErrClosed are
// returned at once. When ctx ends first, Wait returns the Result of the last
// attempt and errors.Join of the last failure (a *HeldError, which matches
// ErrHeld, or the last transport error) and ctx.Err(); compare with
// errors.Is, never ==.
func Wait(ctx context.Context, p Provider, key, owner string, ttl time.Duration, b Backoff) (Result, error) {
	if err := checkProvider(p); err != nil {
		return Result{}, err
	}
	if err := CheckAcquire(key, owner, ttl); err != nil {
		return Result{}, err
	}
	lo, hi, err := b.bounds()
	if err != nil {
		return Result{}, err
	}
	var (
		last  Result
		cause error // why the last attempt did not win
	)
	ended := func() (Result, error) {
		if cause == nil {
			return last, ctx.Err()
		}
		return last, errors.Join(cause, ctx.Err())
	}
	delays := backoff.Policy{Min: lo, Max: hi, Jitter: true}
	for n := 0; ; n++ {
		if ctx.Err() != nil {
			return ended()
		}
		r, err := p.AcquireLease(ctx, key, owner, ttl)
		switch {
		case err == nil && r.Acquired:
			return r, nil
		case err == nil:
			last, cause = r, NewHeldError(key, r)
		case errors.Is(err, ErrInvalid), errors.Is(err, ErrClosed):
			return Result{}, err
		case ctx.Err() != nil:
			if cause == nil {
				cause = fmt.Errorf("lease: acquire %q for %s: %w", key, owner, err)
			}
			return ended()
		default:
			cause = fmt.Errorf("lease: acquire %q for %s: %w", key, owner, err)
		}
		d := delays.Delay(n)
		if err == nil && r.TTL > 0 {
			d = min(d, r.TTL+waitSlack)
		}
		if backoff.Sleep(ctx, d) != nil {
			return ended()
		}
	}
}
