package redisstreams

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/lease"
)

// runSynced runs a lease script that may start or extend a tenure (acquire,
// transfer, renew) followed, on the same connection of the master of
// leaseKey, by WAIT (and WAITAOF), as Options.LeaseSyncReplicas and
// LeaseSyncAOF ask. won tells from the script's reply whether the caller
// won (or renewed: did names it in errors); a win that did not reach the
// replicas (or the AOF) in time is returned as an error. It bypasses the
// lease combiner: the wait must follow the caller's own script. It returns
// when ctx ends, as runLease does (see awaitSend), with the error of
// mayHaveRun.
func (b *Backend) runSynced(ctx context.Context, c *leaseCall, leaseKey, did string, won func(any) bool) (any, error) {
	if ctx.Done() == nil { // ctx cannot end: no goroutine needed
		return b.runSyncedNow(ctx, c, leaseKey, did, won)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%w (%w)", err, lease.ErrNotSent) // nothing sent, as go-redis would send nothing
	}
	var reply any
	var err error
	done := make(chan struct{})
	if !b.awaitSend(ctx, done, func() {
		reply, err = b.runSyncedNow(ctx, c, leaseKey, did, won)
		close(done)
	}) {
		return mayHaveRun(ctx).Result()
	}
	return reply, endedWith(ctx, err)
}

// runSyncedNow is runSynced, waiting for the client whatever ctx does.
func (b *Backend) runSyncedNow(ctx context.Context, c *leaseCall, leaseKey, did string, won func(any) bool) (any, error) {
	wait, waitAOF, err := b.sendSynced(ctx, []*leaseCall{c}, leaseKey)
	if err != nil {
		return nil, err
	}
	reply, err := c.cmd.Result()
	if err != nil || !won(reply) {
		return reply, err
	}
	if err := b.syncErr(wait, waitAOF, did); err != nil {
		return nil, err
	}
	return reply, nil
}

// sendSynced sends calls in one pipeline on one connection of the master of
// key, followed by WAIT (and WAITAOF) as the options ask, and returns those;
// calls the server answers NOSCRIPT are sent again as EVAL, in a second
// such pipeline, whose waits it then returns (a WAIT covers every earlier
// write of its connection). Each call carries its own reply or error; when
// the Cluster cannot tell key's master, each carries that error, and so
// does the returned one.
func (b *Backend) sendSynced(ctx context.Context, calls []*leaseCall, key string) (*redis.IntCmd, *redis.SliceCmd, error) {
	conn, err := b.masterConn(ctx, key)
	if err != nil {
		for _, c := range calls {
			c.cmd.SetErr(err)
		}
		return nil, nil, err
	}
	timeout := b.opts.LeaseSyncTimeout.Milliseconds()
	send := func(calls []*leaseCall) (*redis.IntCmd, *redis.SliceCmd) {
		p := conn.Pipeline()
		for _, c := range calls {
			_ = p.Process(ctx, c.cmd)
		}
		var wait *redis.IntCmd
		var waitAOF *redis.SliceCmd
		var waits []redis.Cmder
		if b.opts.LeaseSyncReplicas > 0 {
			wait = redis.NewIntCmd(ctx, "wait", b.opts.LeaseSyncReplicas, timeout)
			waits = append(waits, wait)
		}
		if b.opts.LeaseSyncAOF {
			waitAOF = redis.NewSliceCmd(ctx, "waitaof", 1, b.opts.LeaseSyncReplicas, timeout)
			waits = append(waits, waitAOF)
		}
		for _, w := range waits {
			_ = p.Process(ctx, w)
		}
		b.execSynced(ctx, p, conn.Options().Addr, waits...) // each command carries its own error
		return wait, waitAOF
	}
	wait, waitAOF := send(calls)
	var again []*leaseCall
	for _, c := range calls {
		if isNoScript(c.cmd.Err()) {
			b.hints.note(c.script, c.cmd.Err())
			c.cmd = c.eval(ctx)
			again = append(again, c)
		}
	}
	if len(again) > 0 {
		wait, waitAOF = send(again)
	}
	for _, c := range calls {
		b.hints.note(c.script, c.cmd.Err())
	}
	return wait, waitAOF, nil
}

// syncErr returns nil when the waits sendSynced returned saw the replicas
// (and the AOF) acknowledge in time, and otherwise an error saying that the
// change stands on the master but is not reported as did ("won",
// "renewed").
func (b *Backend) syncErr(wait *redis.IntCmd, waitAOF *redis.SliceCmd, did string) error {
	stays := "the lease stays on the master until its TTL ends"
	if did == "renewed" {
		stays = "the master keeps the new TTL, which a failover may undo"
	}
	if wait != nil {
		n, err := wait.Result()
		if err != nil {
			return fmt.Errorf("%s on the master, but WAIT failed, so not reported as %s: %w", did, did, err)
		}
		if n < int64(b.opts.LeaseSyncReplicas) {
			return fmt.Errorf("%s on the master, but only %d of %d replicas acknowledged within %v (LeaseSyncReplicas), so not reported as %s; %s", did, n, b.opts.LeaseSyncReplicas, b.opts.LeaseSyncTimeout, did, stays)
		}
	}
	if waitAOF != nil {
		v, err := waitAOF.Result()
		if err != nil {
			return fmt.Errorf("%s on the master, but WAITAOF failed (it needs Redis 7.2 or later), so not reported as %s: %w", did, did, err)
		}
		if len(v) != 2 || v[0] != int64(1) || toInt64(v[1]) < int64(b.opts.LeaseSyncReplicas) {
			return fmt.Errorf("%s on the master, but WAITAOF answered %v within %v (LeaseSyncAOF), so not reported as %s", did, v, b.opts.LeaseSyncTimeout, did)
		}
	}
	return nil
}

func toInt64(v any) int64 {
	n, _ := v.(int64)
	return n
}
