package redisstreams

import (
	"context"

	"github.com/redis/go-redis/v9"
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
// caller sends its commands at once; otherwise they go out with everything
// queued meanwhile in the next pipeline. So many subscriptions reading at
// once cost a few round trips, not one each.
//
// It always waits for the answer, also when ctx (the subscription's) ends
// meanwhile, and sends without ctx's cancellation (go-redis timeouts bound
// it): a read that ran delivered its entries to this consumer, and the
// caller must see them to hand them back as it stops (cleanup). Leaving
// early would let cleanup delete the consumer, and with it those pending
// entries, which then nobody would ever get.
func (s *streamBus) runReads(ctx context.Context, cmds []redis.Cmder) {
	ctx = context.WithoutCancel(ctx)
	r := &readReq{cmds: cmds}
	q := &s.readQ
	if q.join(r, readMaxActive) {
		s.sendReads(ctx, []*readReq{r})
		q.finish(readMaxBatch)
		return
	}
	// ctx cannot end: await returns once r is answered or r's caller is
	// to lead the next batch.
	batch, _, _ := q.await(ctx, r, readMaxBatch, s.sendReadBatch)
	if batch != nil {
		s.sendReadBatch(batch)
		q.answered(batch, r)
		q.finish(readMaxBatch)
	}
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
