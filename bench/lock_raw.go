package main

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// rawLock is the hand-written go-redis baseline: SET NX PX to acquire, a
// compare-and-delete script to release, and a pipeline of
// compare-and-PEXPIRE scripts (EVALSHA) to renew many leases.
type rawLock struct{ c *redis.Client }

type rawHeld struct{ key, owner string }

var (
	rawRelease = redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) end return 0`)
	rawRenew   = redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("pexpire", KEYS[1], ARGV[2]) end return 0`)
)

func newRawLock(c *redis.Client) (lockBackend, error) {
	ctx := context.Background()
	if err := rawRelease.Load(ctx, c).Err(); err != nil {
		return nil, err
	}
	if err := rawRenew.Load(ctx, c).Err(); err != nil {
		return nil, err
	}
	return &rawLock{c: c}, nil
}

func (r *rawLock) Acquire(ctx context.Context, key, owner string, ttl time.Duration) (any, bool, error) {
	err := r.c.SetArgs(ctx, key, owner, redis.SetArgs{Mode: "NX", TTL: ttl}).Err()
	if errors.Is(err, redis.Nil) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return rawHeld{key, owner}, true, nil
}

func (r *rawLock) Release(ctx context.Context, held any) error {
	h := held.(rawHeld)
	return rawRelease.Run(ctx, r.c, []string{h.key}, h.owner).Err()
}

func (r *rawLock) RenewAll(ctx context.Context, held []any, ttl time.Duration) (int, error) {
	pipe := r.c.Pipeline()
	cmds := make([]*redis.Cmd, len(held))
	for i, x := range held {
		h := x.(rawHeld)
		cmds[i] = rawRenew.EvalSha(ctx, pipe, []string{h.key}, h.owner, ttl.Milliseconds())
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, err
	}
	n := 0
	for _, c := range cmds {
		if v, _ := c.Int64(); v == 1 {
			n++
		}
	}
	return n, nil
}
