package redisstreams

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/lease"
)

// InspectLease returns the live lease on key — owner, token and the time
// left by the server's clock — read atomically by one script
// (lease.Inspector). When there is no live lease it returns a zero Info with
// Key set and a nil error. Bad input returns an error wrapping
// lease.ErrInvalid; after Close, lease.ErrClosed.
func (b *Backend) InspectLease(ctx context.Context, key string) (lease.Info, error) {
	if err := lease.CheckKey(key); err != nil {
		return lease.Info{}, err
	}
	if b.isClosed() {
		return lease.Info{}, lease.ErrClosed
	}
	info, ok, err := parseInspect(key, b.runLeaseMigrating(ctx, b.inspectCall(ctx, key)))
	if err != nil {
		return lease.Info{}, b.leaseErr("inspect", key, err)
	}
	if !ok {
		return lease.Info{Key: key}, nil
	}
	return info, nil
}

// parseInspect reads the reply of inspect.lua; ok is false when there is no
// live lease.
func parseInspect(key string, cmd *redis.Cmd) (info lease.Info, ok bool, err error) {
	vals, err := cmd.Slice()
	switch {
	case errors.Is(err, redis.Nil):
		return lease.Info{}, false, nil
	case err != nil:
		return lease.Info{}, false, err
	}
	if len(vals) != 3 {
		return lease.Info{}, false, fmt.Errorf("unexpected reply %v", vals)
	}
	owner, ok1 := vals[0].(string)
	tok, ok2 := vals[1].(int64)
	ms, ok3 := vals[2].(int64)
	if !ok1 || !ok2 || !ok3 {
		return lease.Info{}, false, fmt.Errorf("unexpected reply %v", vals)
	}
	return lease.Info{Key: key, Owner: owner, Token: uint64(tok), TTL: pttl(ms)}, true, nil
}

// inspectCall builds the inspect script of key.
func (b *Backend) inspectCall(ctx context.Context, key string) *leaseCall {
	return newCall(ctx, inspectScript, []string{b.keys.Lease(key), b.keys.Fence(key)})
}

// ListLeases returns every live lease whose key starts with prefix ("" lists
// all), in no particular order (lease.Inspector). It scans the lease keys with
// SCAN MATCH ... COUNT 1000 — on every master of a Cluster, every shard of a
// Ring — and then reads each lease with the inspect script, pipelined in
// chunks of PipelineChunk. A lease that expires between the scan and the read
// is left out. It is meant for operators: its cost grows with the number of
// keys in the database, not with the number of matches. It returns when ctx
// ends, as the single-lease calls do (see "Clients and deadlines" in the
// package doc). After Close it returns lease.ErrClosed.
func (b *Backend) ListLeases(ctx context.Context, prefix string) ([]lease.Info, error) {
	if b.isClosed() {
		return nil, lease.ErrClosed
	}
	if ctx.Done() == nil {
		return b.listLeases(ctx, prefix)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// Returns when ctx ends, also while the scan waits for a server that
	// stopped answering (awaitSend; go-redis does not end a blocked read
	// when ctx is cancelled).
	var (
		infos []lease.Info
		err   error
	)
	done := make(chan struct{})
	if b.awaitSend(ctx, done, func() {
		infos, err = b.listLeases(ctx, prefix)
		close(done)
	}) {
		return infos, endedWith(ctx, err)
	}
	return nil, fmt.Errorf("redisstreams: list leases %q: %w", prefix, ctx.Err())
}

// listLeases is ListLeases, waiting for the client whatever ctx does.
func (b *Backend) listLeases(ctx context.Context, prefix string) ([]lease.Info, error) {
	names, err := b.scanLeases(ctx, prefix)
	if err != nil {
		return nil, b.batchErr(fmt.Sprintf("list leases %q", prefix), err)
	}
	calls := make([]*leaseCall, len(names))
	for i, name := range names {
		calls[i] = b.inspectCall(ctx, name)
	}
	if err := b.runPipelined(ctx, calls); err != nil {
		return nil, b.batchErr(fmt.Sprintf("list leases %q", prefix), err)
	}
	var out []lease.Info
	for i, c := range calls {
		info, ok, err := parseInspect(names[i], c.cmd)
		if err != nil {
			return nil, b.leaseErr("inspect", names[i], err)
		}
		if ok {
			out = append(out, info)
		}
	}
	return out, nil
}

// scanLeases returns the lease keys (user names, decoded) whose name starts
// with prefix, each once.
func (b *Backend) scanLeases(ctx context.Context, prefix string) ([]string, error) {
	pattern := b.keys.LeasePattern(prefix)
	var (
		mu    sync.Mutex
		seen  = make(map[string]struct{})
		names []string
	)
	scan := func(ctx context.Context, c redis.Cmdable) error {
		it := c.Scan(ctx, 0, pattern, 1000).Iterator()
		for it.Next(ctx) {
			name, ok := b.keys.ParseLease(it.Val())
			if !ok {
				continue
			}
			mu.Lock()
			if _, dup := seen[name]; !dup {
				seen[name] = struct{}{}
				names = append(names, name)
			}
			mu.Unlock()
		}
		return it.Err()
	}
	var err error
	switch c := b.client.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error { return scan(ctx, node) })
	case *redis.Ring:
		err = c.ForEachShard(ctx, func(ctx context.Context, shard *redis.Client) error { return scan(ctx, shard) })
	default:
		err = scan(ctx, b.client)
	}
	if err != nil {
		return nil, fmt.Errorf("scan %s: %w", pattern, err)
	}
	return names, nil
}
