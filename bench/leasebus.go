//go:build !noleasebus

package main

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/pubsub"
	"github.com/leasebus/leasebus/redisstreams"
)

const leasebusMissing = ""

func leasebusPubSub() []pubsubContender {
	return []pubsubContender{{nameLeasebus, newLeasebusPubSub}}
}

func leasebusLocks() []lockContender {
	return []lockContender{{nameLeasebus, newLeasebusLock}}
}

// lbPubSub is redisstreams.Backend with its default Options.
type lbPubSub struct{ b *redisstreams.Backend }

func newLeasebusPubSub(c *redis.Client) (pubsubBackend, error) {
	b, err := redisstreams.New(c, redisstreams.Options{})
	if err != nil {
		return nil, err
	}
	return &lbPubSub{b: b}, nil
}

func (l *lbPubSub) Publish(ctx context.Context, topic string, payload []byte) error {
	return l.b.Publish(ctx, topic, pubsub.Event{Type: "bench", Data: payload})
}

func (l *lbPubSub) Subscribe(ctx context.Context, topic, group string, h func([]byte)) (func() error, error) {
	var opts []pubsub.SubscribeOption
	if group != "" {
		opts = append(opts, pubsub.Group(group))
	}
	sub, err := l.b.Subscribe(ctx, topic, func(_ context.Context, e pubsub.Event) error {
		h(e.Data)
		return nil
	}, opts...)
	if err != nil {
		return nil, err
	}
	return func() error { return sub.Unsubscribe(context.Background()) }, nil
}

func (l *lbPubSub) Close() error { return l.b.Close() }

// lbLock is redisstreams.Backend as a lease.Provider; renewal goes through
// its lease.BatchRenewer.
type lbLock struct {
	b  *redisstreams.Backend
	br lease.BatchRenewer
}

type lbHeld struct{ key, owner string }

func newLeasebusLock(c *redis.Client) (lockBackend, error) {
	b, err := redisstreams.New(c, redisstreams.Options{})
	if err != nil {
		return nil, err
	}
	return &lbLock{b: b, br: b}, nil
}

func (l *lbLock) Acquire(ctx context.Context, key, owner string, ttl time.Duration) (any, bool, error) {
	res, err := l.b.AcquireLease(ctx, key, owner, ttl)
	if err != nil || !res.Acquired {
		return nil, false, err
	}
	return lbHeld{key, owner}, true, nil
}

func (l *lbLock) Release(ctx context.Context, held any) error {
	h := held.(lbHeld)
	return l.b.ReleaseLease(ctx, h.key, h.owner)
}

func (l *lbLock) RenewAll(ctx context.Context, held []any, ttl time.Duration) (int, error) {
	reqs := make([]lease.Renewal, len(held))
	for i, x := range held {
		h := x.(lbHeld)
		reqs[i] = lease.Renewal{Key: h.key, Owner: h.owner, TTL: ttl}
	}
	ok, err := l.br.RenewLeases(ctx, reqs)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, v := range ok {
		if v {
			n++
		}
	}
	return n, nil
}

func (l *lbLock) Close() error { return l.b.Close() }
