package redistest

import (
	"context"
	"net"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// RoundTrips is a go-redis hook that counts round trips to Redis: one per
// command sent alone, one per pipeline or transaction however many commands
// it carries (a blocking read counts once per call). Dials are counted
// apart. Add it with AddHook; on a Cluster add one to each node client in
// OnNewNode to count per node. When Observe is set it is called with each
// round trip (its ctx, its commands, and whether it is a pipeline) before
// the round trip is sent, for tests that attribute round trips themselves;
// when Answered is set it is called the same way once the round trip
// returned (the commands hold their replies or errors). The zero value
// counts; it is safe for concurrent use.
type RoundTrips struct {
	Observe  func(ctx context.Context, cmds []redis.Cmder, pipeline bool)
	Answered func(ctx context.Context, cmds []redis.Cmder, pipeline bool)

	n, dials atomic.Int64
}

var _ redis.Hook = (*RoundTrips)(nil)

// N returns the round trips counted since the start or the last Reset.
func (h *RoundTrips) N() int64 { return h.n.Load() }

// Dials returns the connections dialled since the start or the last Reset.
func (h *RoundTrips) Dials() int64 { return h.dials.Load() }

// Reset sets both counts to zero.
func (h *RoundTrips) Reset() {
	h.n.Store(0)
	h.dials.Store(0)
}

// DialHook counts a dial.
func (h *RoundTrips) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		h.dials.Add(1)
		return next(ctx, network, addr)
	}
}

// ProcessHook counts a command sent alone.
func (h *RoundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.trip(ctx, []redis.Cmder{cmd}, false)
		err := next(ctx, cmd)
		if h.Answered != nil {
			h.Answered(ctx, []redis.Cmder{cmd}, false)
		}
		return err
	}
}

// ProcessPipelineHook counts a pipeline or transaction.
func (h *RoundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.trip(ctx, cmds, true)
		err := next(ctx, cmds)
		if h.Answered != nil {
			h.Answered(ctx, cmds, true)
		}
		return err
	}
}

func (h *RoundTrips) trip(ctx context.Context, cmds []redis.Cmder, pipeline bool) {
	h.n.Add(1)
	if h.Observe != nil {
		h.Observe(ctx, cmds, pipeline)
	}
}
