package redisstreams

import (
	"context"
	_ "embed"
	"fmt"

	"github.com/leasebus/leasebus/pubsub"
)

var _ pubsub.DrainedDeleter = (*Backend)(nil)

var (
	//go:embed lua/delete_drained.lua
	deleteDrainedLua    string
	deleteDrainedScript = newLuaScript(deleteDrainedLua)
)

// DeleteTopicIfDrained deletes topic's stream, with its groups, in one
// script, when group is its only group and has been given and has acked
// every entry (pubsub.DrainedDeleter); see lua/delete_drained.lua. A
// subscription still reading the stream sees it vanish (its group is
// recreated on its next read): unsubscribe first. Errors:
// pubsub.ErrInvalid for an empty topic or group, pubsub.ErrClosed after
// Close, the wrapped Redis error otherwise. It returns when ctx ends, also
// while waiting for a server that stopped answering; the error then wraps
// ctx's and says the script may have run.
func (b *Backend) DeleteTopicIfDrained(ctx context.Context, topic, group string) (bool, error) {
	switch {
	case topic == "":
		return false, fmt.Errorf("%w: topic is empty", pubsub.ErrInvalid)
	case group == "":
		return false, fmt.Errorf("%w: group is empty (topic %q)", pubsub.ErrInvalid, topic)
	case b.isClosed():
		return false, pubsub.ErrClosed
	}
	key := b.keys.Stream(topic)
	c := newCall(ctx, deleteDrainedScript, []string{key}, group)
	n, err := b.sendCtx(ctx, c).Int64()
	if err != nil {
		return false, fmt.Errorf("redisstreams: delete %q if drained: %w", key, err)
	}
	return n == 1, nil
}
