package redisstreams

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// ErrUnsafeEviction is matched (errors.Is) by the error CheckEviction
// returns for a server whose maxmemory-policy may evict leasebus keys; the
// error is an *EvictionError naming the server and the policy.
var ErrUnsafeEviction = errors.New("redisstreams: eviction policy may evict leases or fencing counters")

// EvictionError reports a Redis server whose maxmemory-policy is not
// noeviction. It matches ErrUnsafeEviction.
type EvictionError struct {
	Addr   string // the server, as the client knows it
	Policy string // its maxmemory-policy, such as "allkeys-lru"
}

// Error names the server, the policy and what it may evict.
func (e *EvictionError) Error() string {
	what := "live leases (keys with a TTL: a lease can vanish while its holder still runs, until its next renewal fails) and streams with StreamIdleTTL"
	if strings.HasPrefix(e.Policy, "allkeys-") {
		what = "any key: fencing counters (tokens of a later tenure can then go backwards), live leases, streams with unacked events"
	}
	return fmt.Sprintf("redisstreams: Redis at %s has maxmemory-policy %s, which under memory pressure may evict %s; set maxmemory-policy noeviction", e.Addr, e.Policy, what)
}

// Is reports whether target is ErrUnsafeEviction.
func (e *EvictionError) Is(target error) bool { return target == ErrUnsafeEviction }

// CheckEviction reads maxmemory-policy (CONFIG GET) on the client's server:
// the one of a standalone or Sentinel client, every master of a Cluster,
// every shard of a Ring. Only noeviction keeps leasebus safe when Redis runs
// out of memory (writes then fail instead): an allkeys-* policy may evict a
// fencing counter, after which tokens go backwards, and a volatile-* policy
// may evict a live lease (every lease key has a TTL). It returns nil when
// every server has noeviction, an error matching ErrUnsafeEviction (an
// *EvictionError naming the server and the policy) when one does not, and
// another error when the policy cannot be read (CONFIG disabled or renamed,
// as managed services often do, or Redis unreachable): then the caller has
// to check the policy another way. NewURL runs it and logs a warning for an
// unsafe policy; New does not contact Redis, so call it after New.
func (b *Backend) CheckEviction(ctx context.Context) error {
	var (
		mu   sync.Mutex
		errs []error
	)
	check := func(ctx context.Context, c *redis.Client) error {
		err := policyOf(ctx, c)
		if err != nil {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}
		return nil
	}
	var err error
	switch c := b.client.(type) {
	case *redis.Client:
		err = check(ctx, c)
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, check)
	case *redis.Ring:
		err = c.ForEachShard(ctx, check)
	default:
		return fmt.Errorf("redisstreams: cannot check the eviction policy through a %T", b.client)
	}
	if err != nil {
		return fmt.Errorf("redisstreams: check eviction policy: %w", err)
	}
	// Unsafe policies first: they are what the caller must act on.
	var unsafe, other []error
	for _, e := range errs {
		if errors.Is(e, ErrUnsafeEviction) {
			unsafe = append(unsafe, e)
		} else {
			other = append(other, e)
		}
	}
	return errors.Join(append(unsafe, other...)...)
}

// policyOf checks the maxmemory-policy of one server.
func policyOf(ctx context.Context, c *redis.Client) error {
	addr := c.Options().Addr
	vals, err := c.ConfigGet(ctx, "maxmemory-policy").Result()
	if err != nil {
		return fmt.Errorf("redisstreams: read maxmemory-policy of %s: %w", addr, err)
	}
	policy, ok := vals["maxmemory-policy"]
	if !ok {
		return fmt.Errorf("redisstreams: read maxmemory-policy of %s: CONFIG GET returned no value", addr)
	}
	if policy != "noeviction" {
		return &EvictionError{Addr: addr, Policy: policy}
	}
	return nil
}

// warnEviction logs the outcome of CheckEviction for NewURL: a warning for
// an unsafe policy, a debug line when the policy cannot be read.
func (b *Backend) warnEviction(ctx context.Context) {
	err := b.CheckEviction(ctx)
	switch {
	case err == nil:
	case errors.Is(err, ErrUnsafeEviction):
		var ee *EvictionError
		errors.As(err, &ee)
		b.opts.Logger.Warn(err.Error(), "addr", ee.Addr, "maxmemory-policy", ee.Policy)
	default:
		b.opts.Logger.Debug("redisstreams: could not check the eviction policy", "err", err)
	}
}
