package signals

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leasebus/leasebus/lease"
)

// notSentOnce is an in-memory lease.Provider (no expiry) whose first
// failFirst calls fail as redisstreams fails a lease call queued behind a
// batch that failed on a transport error (failLeaseQueueAfter): the error
// wraps lease.ErrNotSent, the call never ran, and a later call succeeds.
type notSentOnce struct {
	mu        sync.Mutex
	owners    map[string]string
	failFirst int
	calls     int
}

func (p *notSentOnce) fail() error {
	p.calls++
	if p.calls <= p.failFirst {
		return fmt.Errorf("redisstreams: lease script not sent (it did not run; %w): the call before it failed: %w",
			lease.ErrNotSent, errors.New("read tcp: connection reset by peer"))
	}
	return nil
}

func (p *notSentOnce) AcquireLease(_ context.Context, key, owner string, ttl time.Duration) (lease.Result, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.fail(); err != nil {
		return lease.Result{}, err
	}
	cur := p.owners[key]
	if cur == "" || cur == owner {
		p.owners[key] = owner
		return lease.Result{Acquired: true, Owner: owner, Token: 1, TTL: ttl}, nil
	}
	return lease.Result{Owner: cur, Token: 1, TTL: ttl}, nil
}

func (p *notSentOnce) GetLeaseOwner(_ context.Context, key string) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.fail(); err != nil {
		return "", err
	}
	return p.owners[key], nil
}

func (p *notSentOnce) ReleaseLease(_ context.Context, key, owner string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.fail(); err != nil {
		return err
	}
	if p.owners[key] == owner {
		delete(p.owners, key)
	}
	return nil
}

func (p *notSentOnce) RenewLease(_ context.Context, key, owner string, _ time.Duration) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.fail(); err != nil {
		return false, err
	}
	return p.owners[key] == owner, nil
}

func (p *notSentOnce) TransferLease(_ context.Context, key, from, to string, _ time.Duration) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.fail(); err != nil {
		return false, err
	}
	if p.owners[key] != from {
		return false, nil
	}
	p.owners[key] = to
	return true, nil
}

// TestDoneRecordWriteRetriesCallNotSent: a done-record write whose lease
// call was never sent (lease.ErrNotSent: redisstreams fails so the calls
// queued behind a batch that failed on a transport error, as when a master
// dies) is tried again like any other failed write, within its ctx. The
// write is the surest to retry of all (it did not run), and the doc of
// writeRecord only excepts calls that "cannot succeed (bad input, closed,
// revoked)". writeRecord used outcomeUnknown, which is false for
// ErrNotSent, so it gave up at once and left the run's IDs out of the
// record (a duplicate Send of them, at another process, ran them again);
// it now uses recordRetryable (review by helper 51).
func TestDoneRecordWriteRetriesCallNotSent(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cached string
	}{
		{"acquire", ""},
		{"transfer", recordAdd("", []string{"earlier"}, nil)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &notSentOnce{owners: map[string]string{}, failFirst: 1}
			if tc.cached != "" {
				p.owners[recordKey("th")] = tc.cached
			}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			rec, err := writeRecord(ctx, p, "th", tc.cached, []string{"sig-1"}, nil, time.Minute)
			if err != nil {
				t.Fatalf("writeRecord gave up after a call that was not sent (%d calls, ctx left %v): %v",
					p.calls, time.Until(deadline(ctx)).Round(time.Millisecond), err)
			}
			if !recordHas(rec, "sig-1") || !recordHas(p.owners[recordKey("th")], "sig-1") {
				t.Fatalf("record %q (stored %q) lacks sig-1", rec, p.owners[recordKey("th")])
			}
		})
	}
}

func deadline(ctx context.Context) time.Time {
	d, _ := ctx.Deadline()
	return d
}
