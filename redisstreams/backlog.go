package redisstreams

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/pubsub"
)

var _ pubsub.BacklogReader = (*Backend)(nil)

// lagScanLimit bounds the entries GroupBacklog counts itself when the server
// cannot tell a group's lag (XINFO GROUPS answers no lag after deletions in
// the stream, or before Redis 7).
const lagScanLimit = 10_000

// GroupBacklog returns the backlog of group on topic (pubsub.BacklogReader),
// from XINFO STREAM and XINFO GROUPS in one pipeline: Pending is the group's
// pending count, Lag the server's lag of the group (when the server cannot
// tell, the entries after the group's last delivered id, counted with
// XRANGE up to 10,000; beyond that Lag is -1; and 0 when the server's lag
// is above zero but no entry is left after the last delivered id, as after
// XDEL or XTRIM of what the group had not read: one more XRANGE then), and
// LastPublished the time in
// the stream's last generated id (the server's clock). A topic without a
// stream has a zero Backlog; a group not created yet lags by the whole
// stream. Errors: pubsub.ErrInvalid for an empty topic or group,
// pubsub.ErrClosed after Close, the wrapped Redis error otherwise, and
// ctx.Err() (wrapped) when ctx ends first: it returns then also while the
// reads wait for a server that stopped answering (awaitSend; go-redis does
// not end a blocked read when ctx is cancelled), so that the signals
// runtime's Status and its lapse and watch checks end with their ctx
// (TestNamedCallsReturnAtCancelOnStalledServer: 4.8s after the cancel
// before, go-redis's ReadTimeout).
func (b *Backend) GroupBacklog(ctx context.Context, topic, group string) (pubsub.Backlog, error) {
	switch {
	case topic == "":
		return pubsub.Backlog{}, fmt.Errorf("%w: topic is empty", pubsub.ErrInvalid)
	case group == "":
		return pubsub.Backlog{}, fmt.Errorf("%w: group is empty (topic %q)", pubsub.ErrInvalid, topic)
	case b.isClosed():
		return pubsub.Backlog{}, pubsub.ErrClosed
	}
	if ctx.Done() == nil { // ctx cannot end: no goroutine needed
		return b.groupBacklog(ctx, topic, group)
	}
	if err := ctx.Err(); err != nil {
		return pubsub.Backlog{}, fmt.Errorf("redisstreams: backlog of %q on %q: %w", group, topic, err)
	}
	var (
		bl  pubsub.Backlog
		err error
	)
	done := make(chan struct{})
	if b.awaitSend(ctx, done, func() {
		bl, err = b.groupBacklog(ctx, topic, group)
		close(done)
	}) {
		return bl, endedWith(ctx, err)
	}
	return pubsub.Backlog{}, fmt.Errorf("redisstreams: backlog of %q on %q: %w", group, topic, ctx.Err())
}

// groupBacklog is GroupBacklog, waiting for the client whatever ctx does.
func (b *Backend) groupBacklog(ctx context.Context, topic, group string) (pubsub.Backlog, error) {
	key := b.keys.Stream(topic)
	pipe := b.client.Pipeline()
	sc := pipe.XInfoStream(ctx, key)
	gc := pipe.XInfoGroups(ctx, key)
	b.execPipe(ctx, pipe) // each command carries its own error
	info, err := sc.Result()
	switch {
	case isNoSuchKey(err):
		return pubsub.Backlog{}, nil
	case err != nil:
		return pubsub.Backlog{}, fmt.Errorf("redisstreams: xinfo stream %q: %w", key, err)
	}
	bl := pubsub.Backlog{LastPublished: idTime(info.LastGeneratedID)}
	groups, err := gc.Result()
	if err != nil && !isNoSuchKey(err) {
		return pubsub.Backlog{}, fmt.Errorf("redisstreams: xinfo groups %q: %w", key, err)
	}
	for _, g := range groups {
		if g.Name != group {
			continue
		}
		bl.Pending, bl.Lag = g.Pending, g.Lag
		if bl.Lag > 0 {
			// The server's figure (entries added - entries read) stays
			// above zero after the entries the group had not read were
			// deleted (XDEL, XTRIM): check that one is left.
			left, err := b.client.XRangeN(ctx, key, "("+g.LastDeliveredID, "+", 1).Result()
			if err != nil && err != redis.Nil {
				return pubsub.Backlog{}, fmt.Errorf("redisstreams: xrange %q: %w", key, err)
			}
			if len(left) == 0 {
				bl.Lag = 0
			}
		}
		if bl.Lag < 0 {
			bl.Lag, err = b.countAfter(ctx, key, g.LastDeliveredID)
			if err != nil {
				return pubsub.Backlog{}, err
			}
		}
		return bl, nil
	}
	bl.Lag = info.Length
	return bl, nil
}

// countAfter counts the entries of the stream at key after id, up to
// lagScanLimit (-1 beyond).
func (b *Backend) countAfter(ctx context.Context, key, id string) (int64, error) {
	msgs, err := b.client.XRangeN(ctx, key, "("+id, "+", lagScanLimit+1).Result()
	if err != nil && err != redis.Nil {
		return 0, fmt.Errorf("redisstreams: xrange %q: %w", key, err)
	}
	if len(msgs) > lagScanLimit {
		return -1, nil
	}
	return int64(len(msgs)), nil
}

// idTime returns the time in a stream entry id ("<ms>-<seq>"); zero for
// "0-0" or an unreadable id.
func idTime(id string) time.Time {
	ms, _, _ := strings.Cut(id, "-")
	n, err := strconv.ParseInt(ms, 10, 64)
	if err != nil || n <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(n)
}
