package redisstreams

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/lease"
)

// runSynced runs a lease script that may start a tenure (acquire, transfer)
// followed, on the same connection of the master of leaseKey, by WAIT (and
// WAITAOF), as Options.LeaseSyncReplicas and LeaseSyncAOF ask. won tells
// from the script's reply whether the caller won; a win that did not reach
// the replicas (or the AOF) in time is returned as an error. It bypasses the
// lease combiner: the wait must follow the caller's own script. It returns
// when ctx ends, as runLease does (see awaitSend), with the error of
// mayHaveRun.
func (b *Backend) runSynced(ctx context.Context, c *leaseCall, leaseKey string, won func(any) bool) (any, error) {
	if ctx.Done() == nil { // ctx cannot end: no goroutine needed
		return b.runSyncedNow(ctx, c, leaseKey, won)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%w (%w)", err, lease.ErrNotSent) // nothing sent, as go-redis would send nothing
	}
	var reply any
	var err error
	done := make(chan struct{})
	if !b.awaitSend(ctx, done, func() {
		reply, err = b.runSyncedNow(ctx, c, leaseKey, won)
		close(done)
	}) {
		return mayHaveRun(ctx).Result()
	}
	return reply, endedWith(ctx, err)
}

// runSyncedNow is runSynced, waiting for the client whatever ctx does.
func (b *Backend) runSyncedNow(ctx context.Context, c *leaseCall, leaseKey string, won func(any) bool) (any, error) {
	var conn redis.Cmdable = b.client
	if cc, ok := b.client.(*redis.ClusterClient); ok {
		node, err := cc.MasterForKey(ctx, leaseKey)
		if err != nil {
			return nil, err
		}
		conn = node
	}
	timeout := b.opts.LeaseSyncTimeout.Milliseconds()
	send := func() (*redis.IntCmd, *redis.SliceCmd) {
		p := conn.Pipeline()
		_ = p.Process(ctx, c.cmd)
		var wait *redis.IntCmd
		var waitAOF *redis.SliceCmd
		if b.opts.LeaseSyncReplicas > 0 {
			wait = redis.NewIntCmd(ctx, "wait", b.opts.LeaseSyncReplicas, timeout)
			_ = p.Process(ctx, wait)
		}
		if b.opts.LeaseSyncAOF {
			waitAOF = redis.NewSliceCmd(ctx, "waitaof", 1, b.opts.LeaseSyncReplicas, timeout)
			_ = p.Process(ctx, waitAOF)
		}
		_, _ = p.Exec(ctx) // each command carries its own error
		return wait, waitAOF
	}
	wait, waitAOF := send()
	if isNoScript(c.cmd.Err()) {
		b.hints.note(c.script, c.cmd.Err())
		c.cmd = c.eval(ctx)
		wait, waitAOF = send()
	}
	b.hints.note(c.script, c.cmd.Err())
	reply, err := c.cmd.Result()
	if err != nil || !won(reply) {
		return reply, err
	}
	if wait != nil {
		n, err := wait.Result()
		if err != nil {
			return nil, fmt.Errorf("won on the master, but WAIT failed, so not reported as won: %w", err)
		}
		if n < int64(b.opts.LeaseSyncReplicas) {
			return nil, fmt.Errorf("won on the master, but only %d of %d replicas acknowledged within %v (LeaseSyncReplicas), so not reported as won; the lease stays on the master until its TTL ends", n, b.opts.LeaseSyncReplicas, b.opts.LeaseSyncTimeout)
		}
	}
	if waitAOF != nil {
		v, err := waitAOF.Result()
		if err != nil {
			return nil, fmt.Errorf("won on the master, but WAITAOF failed (it needs Redis 7.2 or later), so not reported as won: %w", err)
		}
		if len(v) != 2 || v[0] != int64(1) || toInt64(v[1]) < int64(b.opts.LeaseSyncReplicas) {
			return nil, fmt.Errorf("won on the master, but WAITAOF answered %v within %v (LeaseSyncAOF), so not reported as won", v, b.opts.LeaseSyncTimeout)
		}
	}
	return reply, nil
}

func toInt64(v any) int64 {
	n, _ := v.(int64)
	return n
}
