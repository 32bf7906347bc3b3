package main

import (
	"context"
	"errors"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
)

// redislockLock is bsm/redislock with no retry: Obtain, Release, and Refresh
// one lock at a time.
type redislockLock struct{ c *redislock.Client }

func newRedislock(c *redis.Client) (lockBackend, error) {
	return &redislockLock{c: redislock.New(c)}, nil
}

func (r *redislockLock) Acquire(ctx context.Context, key, _ string, ttl time.Duration) (any, bool, error) {
	l, err := r.c.Obtain(ctx, key, ttl, nil)
	if errors.Is(err, redislock.ErrNotObtained) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return l, true, nil
}

func (r *redislockLock) Release(ctx context.Context, held any) error {
	return held.(*redislock.Lock).Release(ctx)
}

func (r *redislockLock) RenewAll(ctx context.Context, held []any, ttl time.Duration) (int, error) {
	n := 0
	for _, h := range held {
		err := h.(*redislock.Lock).Refresh(ctx, ttl, nil)
		if errors.Is(err, redislock.ErrNotObtained) {
			continue
		}
		if err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// redsyncLock is go-redsync/redsync/v4 on one go-redis pool, one try per
// acquire: a Mutex per acquire, LockContext, UnlockContext, and
// ExtendContext one mutex at a time.
type redsyncLock struct{ rs *redsync.Redsync }

func newRedsync(c *redis.Client) (lockBackend, error) {
	return &redsyncLock{rs: redsync.New(goredis.NewPool(c))}, nil
}

func (r *redsyncLock) Acquire(ctx context.Context, key, _ string, ttl time.Duration) (any, bool, error) {
	m := r.rs.NewMutex(key, redsync.WithExpiry(ttl), redsync.WithTries(1))
	err := m.LockContext(ctx)
	var taken *redsync.ErrTaken
	if errors.Is(err, redsync.ErrFailed) || errors.As(err, &taken) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return m, true, nil
}

func (r *redsyncLock) Release(ctx context.Context, held any) error {
	_, err := held.(*redsync.Mutex).UnlockContext(ctx)
	return err
}

func (r *redsyncLock) RenewAll(ctx context.Context, held []any, _ time.Duration) (int, error) {
	n := 0
	for _, h := range held {
		ok, err := h.(*redsync.Mutex).ExtendContext(ctx)
		if errors.Is(err, redsync.ErrExtendFailed) {
			continue
		}
		if err != nil {
			return n, err
		}
		if ok {
			n++
		}
	}
	return n, nil
}
