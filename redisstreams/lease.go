package redisstreams

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/lease"
)

// Lease layout. The lease on key k is the string key b.keys.Lease(k) holding
// "<token>:<owner>" with a PX expiry set by the server; its fencing counter is
// b.keys.Fence(k), an integer in the same hash slot with no TTL, which this
// package only ever INCRs. The token is decimal, so the first ':' always
// separates it from the owner, whatever bytes the owner holds.
//
// Every operation is one Lua script run with EVALSHA (EVAL when the server
// answers NOSCRIPT); expiry is counted by the server's clock only.

var (
	//go:embed lua/acquire.lua
	acquireLua    string
	acquireScript = redis.NewScript(acquireLua)

	//go:embed lua/renew.lua
	renewLua    string
	renewScript = redis.NewScript(renewLua)

	//go:embed lua/release.lua
	releaseLua    string
	releaseScript = redis.NewScript(releaseLua)

	//go:embed lua/transfer.lua
	transferLua    string
	transferScript = redis.NewScript(transferLua)

	//go:embed lua/owner.lua
	ownerLua    string
	ownerScript = redis.NewScript(ownerLua)

	//go:embed lua/inspect.lua
	inspectLua    string
	inspectScript = redis.NewScript(inspectLua)
)

// PipelineChunk is the largest number of scripts RenewLeases and ListLeases
// send in one pipeline: 10,000 renewals take 10 round trips (per Cluster
// node, run in parallel across nodes).
const PipelineChunk = 1000

// AcquireLease takes key for owner for ttl, as lease.Provider says, in one Lua
// script. A free or expired key starts a new tenure whose token comes from the
// key's fencing counter; a key owner already holds gets its TTL reset to ttl
// and keeps its token; a key held by another owner is left alone and the
// result names that holder, its token and the time left (Acquired false, nil
// error; build a *lease.HeldError with lease.NewHeldError when you need one).
// Bad input returns an error wrapping lease.ErrInvalid; after Close,
// lease.ErrClosed; a Redis failure, the wrapped Redis error.
func (b *Backend) AcquireLease(ctx context.Context, key, owner string, ttl time.Duration) (lease.Result, error) {
	if err := lease.CheckAcquire(key, owner, ttl); err != nil {
		return lease.Result{}, err
	}
	if b.isClosed() {
		return lease.Result{}, lease.ErrClosed
	}
	reply, err := acquireScript.Run(ctx, b.client,
		[]string{b.keys.Lease(key), b.keys.Fence(key)}, owner, ttlMillis(ttl)).Result()
	if err != nil {
		return lease.Result{}, b.leaseErr("acquire", key, err)
	}
	r, err := parseAcquire(reply, owner, ttl)
	if err != nil {
		return lease.Result{}, b.leaseErr("acquire", key, err)
	}
	return r, nil
}

// parseAcquire reads the reply of acquire.lua: the token when owner holds
// the lease for ttl, else {holder, token, pttl}.
func parseAcquire(reply any, owner string, ttl time.Duration) (lease.Result, error) {
	switch v := reply.(type) {
	case int64:
		return lease.Result{Acquired: true, Owner: owner, Token: uint64(v), TTL: ttl.Truncate(time.Millisecond)}, nil
	case []any:
		if len(v) == 3 {
			holder, ok1 := v[0].(string)
			tok, ok2 := v[1].(int64)
			ms, ok3 := v[2].(int64)
			if ok1 && ok2 && ok3 {
				return lease.Result{Owner: holder, Token: uint64(tok), TTL: pttl(ms)}, nil
			}
		}
	}
	return lease.Result{}, fmt.Errorf("unexpected reply %v", reply)
}

// GetLeaseOwner returns the holder of the live lease on key, or "" when there
// is none. Bad input returns an error wrapping lease.ErrInvalid; after Close,
// lease.ErrClosed.
func (b *Backend) GetLeaseOwner(ctx context.Context, key string) (string, error) {
	if err := lease.CheckKey(key); err != nil {
		return "", err
	}
	if b.isClosed() {
		return "", lease.ErrClosed
	}
	owner, err := ownerScript.Run(ctx, b.client, []string{b.keys.Lease(key)}).Text()
	switch {
	case errors.Is(err, redis.Nil):
		return "", nil
	case err != nil:
		return "", b.leaseErr("get owner of", key, err)
	}
	return owner, nil
}

// ReleaseLease deletes the lease on key when owner holds it, and otherwise
// does nothing and returns nil; the check and the delete are one script. The
// fencing counter is kept, so the next tenure gets a higher token. Bad input
// returns an error wrapping lease.ErrInvalid; after Close, lease.ErrClosed.
func (b *Backend) ReleaseLease(ctx context.Context, key, owner string) error {
	if err := lease.CheckRelease(key, owner); err != nil {
		return err
	}
	if b.isClosed() {
		return lease.ErrClosed
	}
	if err := releaseScript.Run(ctx, b.client, []string{b.keys.Lease(key)}, owner).Err(); err != nil {
		return b.leaseErr("release", key, err)
	}
	return nil
}

// RenewLease resets the TTL of owner's live lease on key to ttl and reports
// true; it reports false when owner does not hold a live lease (an expired
// lease is never re-created). Bad input returns an error wrapping
// lease.ErrInvalid; after Close, lease.ErrClosed.
func (b *Backend) RenewLease(ctx context.Context, key, owner string, ttl time.Duration) (bool, error) {
	if err := lease.CheckAcquire(key, owner, ttl); err != nil {
		return false, err
	}
	if b.isClosed() {
		return false, lease.ErrClosed
	}
	n, err := renewScript.Run(ctx, b.client, []string{b.keys.Lease(key)}, owner, ttlMillis(ttl)).Int64()
	if err != nil {
		return false, b.leaseErr("renew", key, err)
	}
	return n == 1, nil
}

// TransferLease hands key from fromOwner to toOwner in one script: the lease
// value is overwritten (never deleted) with toOwner, a new token from the
// fencing counter and a full ttl, and it reports true. It reports false when
// fromOwner does not hold a live lease. Bad input (including fromOwner ==
// toOwner) returns an error wrapping lease.ErrInvalid; after Close,
// lease.ErrClosed.
func (b *Backend) TransferLease(ctx context.Context, key, fromOwner, toOwner string, ttl time.Duration) (bool, error) {
	if err := lease.CheckTransfer(key, fromOwner, toOwner, ttl); err != nil {
		return false, err
	}
	if b.isClosed() {
		return false, lease.ErrClosed
	}
	tok, err := transferScript.Run(ctx, b.client,
		[]string{b.keys.Lease(key), b.keys.Fence(key)}, fromOwner, toOwner, ttlMillis(ttl)).Int64()
	if err != nil {
		return false, b.leaseErr("transfer", key, err)
	}
	return tok > 0, nil
}

// RenewLeases renews each request as RenewLease would and returns one result
// per request, in order (lease.BatchRenewer). The renewals are sent as
// pipelines of up to PipelineChunk scripts, one round trip each (on a Cluster,
// one per node, in parallel); when the server has lost the script cache the
// script is loaded (on every node) and the affected renewals are sent again.
// An error means no result is known and the whole batch should be treated as
// not renewed. A bad request fails the whole call with an error wrapping
// lease.ErrInvalid, before anything is sent; after Close, lease.ErrClosed.
func (b *Backend) RenewLeases(ctx context.Context, reqs []lease.Renewal) ([]bool, error) {
	if err := lease.CheckRenewals(reqs); err != nil {
		return nil, err
	}
	if b.isClosed() {
		return nil, lease.ErrClosed
	}
	out := make([]bool, len(reqs))
	for start := 0; start < len(reqs); start += PipelineChunk {
		chunk := reqs[start:min(start+PipelineChunk, len(reqs))]
		cmds, err := b.pipelineScript(ctx, renewScript, len(chunk), func(p redis.Pipeliner, sha string, i int) *redis.Cmd {
			r := chunk[i]
			return p.EvalSha(ctx, sha, []string{b.keys.Lease(r.Key)}, r.Owner, ttlMillis(r.TTL))
		})
		if err != nil {
			return nil, b.batchErr(fmt.Sprintf("renew %d leases", len(reqs)), err)
		}
		for i, c := range cmds {
			n, err := c.Int64()
			if err != nil {
				return nil, b.leaseErr("renew", chunk[i].Key, err)
			}
			out[start+i] = n == 1
		}
	}
	return out, nil
}

// pipelineScript sends n EVALSHAs of script (built by add) in one pipeline
// and returns their commands, every one of which has a reply. When some
// answer NOSCRIPT, it loads the script (on every node of a Cluster or Ring)
// and sends those again, once. Any other error of any command is returned.
func (b *Backend) pipelineScript(ctx context.Context, script *redis.Script, n int,
	add func(p redis.Pipeliner, sha string, i int) *redis.Cmd,
) ([]*redis.Cmd, error) {
	cmds := make([]*redis.Cmd, n)
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	for attempt := 0; ; attempt++ {
		p := b.client.Pipeline()
		sha := script.Hash()
		for _, i := range idx {
			cmds[i] = add(p, sha, i)
		}
		_, _ = p.Exec(ctx) // each command carries its own error
		var missing []int
		for _, i := range idx {
			err := cmds[i].Err()
			switch {
			case err == nil, errors.Is(err, redis.Nil):
			case (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT")) && attempt == 0:
				missing = append(missing, i)
			default:
				return nil, err
			}
		}
		if len(missing) == 0 {
			return cmds, nil
		}
		if err := script.Load(ctx, b.client).Err(); err != nil {
			return nil, fmt.Errorf("script load: %w", err)
		}
		idx = missing
	}
}

// leaseErr wraps a Redis error of a lease operation on key. A client closed
// by Close (NewURL's own client) reads as lease.ErrClosed.
func (b *Backend) leaseErr(op, key string, err error) error {
	return b.batchErr(fmt.Sprintf("%s lease %q", op, key), err)
}

// batchErr wraps a Redis error of a lease operation described by what, as
// leaseErr does.
func (b *Backend) batchErr(what string, err error) error {
	if errors.Is(err, redis.ErrClosed) && b.isClosed() {
		err = lease.ErrClosed
	}
	return fmt.Errorf("redisstreams: %s: %w", what, err)
}

// ttlMillis converts ttl (at least 1ms, as lease.CheckTTL ensures) to whole
// milliseconds, rounding down so a lease never outlives what was asked.
func ttlMillis(ttl time.Duration) int64 { return int64(ttl / time.Millisecond) }

// pttl converts a PTTL reply to a duration; the negative replies (no expiry,
// no key) read as 0.
func pttl(ms int64) time.Duration {
	if ms < 0 {
		return 0
	}
	return time.Duration(ms) * time.Millisecond
}

// parseValue splits a lease value "<token>:<owner>".
func parseValue(v string) (token uint64, owner string) {
	i := strings.IndexByte(v, ':')
	if i < 0 {
		return 0, v
	}
	tok, err := strconv.ParseUint(v[:i], 10, 64)
	if err != nil {
		return 0, v[i+1:]
	}
	return tok, v[i+1:]
}
