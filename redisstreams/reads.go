package redisstreams

import (
	"context"
	_ "embed"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed lua/delete_consumer.lua
	deleteConsumerLua    string
	deleteConsumerScript = redis.NewScript(deleteConsumerLua)
)

const (
	// readMaxActive is how many batches of group reads may be in flight
	// at once (see runReads).
	readMaxActive = 2
	// readMaxBatch is the most reads (each one subscription's commands)
	// in one batch.
	readMaxBatch = 128
)

// readReq is one group subscription's read: its commands, sent together
// and in order, each carrying its own reply.
type readReq struct {
	t    turn[*readReq]
	cmds []redis.Cmder
}

func (r *readReq) turn() *turn[*readReq] { return &r.t }

// runReads sends cmds (one subscription's non-blocking XREADGROUP and the
// XREVRANGE beside it) and returns once they are answered, each with its
// reply or error. Concurrent calls are coalesced as publishes are (see
// combiner): when fewer than readMaxActive batches are in flight the
// caller sends its commands at once, on ctx; otherwise they go out with
// everything queued meanwhile in the next pipeline, on a context of its own
// (go-redis timeouts and retries bound it). So many subscriptions reading at
// once cost a few round trips, not one each.
//
// A non-nil error (ctx, the subscription's, ended first) means the commands
// may or may not have run, and their replies must not be read. A read that
// ran then delivered entries to this consumer that the subscription never
// saw (as a read whose reply was lost does): they stay pending on the
// consumer, which cleanup keeps (delete_consumer.lua checks and deletes in
// one step), until the group's ack deadline or a ClaimPending successor
// takes them. So a stopping subscription never waits for a read that a
// dead or black-holed server does not answer.
func (s *streamBus) runReads(ctx context.Context, cmds []redis.Cmder) error {
	r := &readReq{cmds: cmds}
	q := &s.readQ
	if q.join(r, readMaxActive) {
		s.sendReads(ctx, []*readReq{r})
		q.finish(readMaxBatch)
		return nil
	}
	batch, _, err := q.await(ctx, r, readMaxBatch, s.sendReadBatch)
	if err != nil {
		return err
	}
	if batch != nil {
		s.sendReadBatch(batch)
		q.answered(batch, r)
		q.finish(readMaxBatch)
	}
	return nil
}

// sendReadBatch sends a batch that queued behind a leader, on a context of
// its own: a caller that gives up must not fail the others.
func (s *streamBus) sendReadBatch(batch []*readReq) { s.sendReads(context.Background(), batch) }

// sendReads sends the commands of batch in one pipeline; each command
// carries its own reply or error.
func (s *streamBus) sendReads(ctx context.Context, batch []*readReq) {
	p := s.b.client.Pipeline()
	for _, r := range batch {
		for _, c := range r.cmds {
			_ = p.Process(ctx, c)
		}
	}
	_, _ = p.Exec(ctx)
}
