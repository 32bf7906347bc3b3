package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Policy is a capped exponential delay: the n-th delay (from 0) is Min·2ⁿ,
// at most Max (Max below Min means Min). With Jitter each delay is moved to a
// random point of its upper half, so that many callers do not retry in step.
// A zero Min gives zero delays.
type Policy struct {
	Min, Max time.Duration
	Jitter   bool
}

// Delay returns the n-th delay of p (n from 0; a negative n counts as 0).
func (p Policy) Delay(n int) time.Duration {
	hi := max(p.Max, p.Min)
	d := p.Min
	if d <= 0 {
		return 0
	}
	for i := 0; i < n && d < hi; i++ {
		if d > hi/2 {
			d = hi
			break
		}
		d *= 2
	}
	d = min(d, hi)
	if p.Jitter && d > 0 {
		half := d / 2
		d = d - half + rand.N(half+1)
	}
	return d
}

// Backoff walks the delays of its Policy: Next returns the delay before the
// next retry, Reset starts over after a success. The zero value of the
// counter is the start. A Backoff is not safe for concurrent use.
type Backoff struct {
	Policy
	n int
}

// Next returns the next delay and moves on.
func (b *Backoff) Next() time.Duration {
	d := b.Delay(b.n)
	if b.n < 64 {
		b.n++
	}
	return d
}

// Reset makes the next delay the first again.
func (b *Backoff) Reset() { b.n = 0 }

// Sleep waits for d or until ctx ends, whichever comes first. It returns nil
// after the full d and ctx.Err() when ctx ended first (also when ctx had
// already ended). A d of zero or less returns at once with ctx.Err().
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
