package redisstreams

import (
	"context"
	_ "embed"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed lua/delete_consumer.lua
	deleteConsumerLua    string
	deleteConsumerScript = redis.NewScript(deleteConsumerLua)

	//go:embed lua/hand_back.lua
	handBackLua    string
	handBackScript = redis.NewScript(handBackLua)
	//go:embed lua/undo_claim.lua
	undoClaimLua    string
	undoClaimScript = redis.NewScript(undoClaimLua)

	//go:embed lua/read.lua
	readLua    string
	readScript = redis.NewScript(readLua)

	//go:embed lua/raise_guard.lua
	raiseGuardLua    string
	raiseGuardScript = redis.NewScript(raiseGuardLua)
)

const (
	// readMaxActive is how many batches of group reads may be in flight
	// at once (see runReads).
	readMaxActive = 2
	// readMaxBatch is the most reads (each one subscription's commands)
	// in one batch.
	readMaxBatch = 128
)

// noRetry adds to pipe a command go-redis never retries (an O(1) XLEN of
// key, sent with its reply discarded): go-redis then retries none of the
// pipeline (per node on a Cluster, so key must be on the node of the other
// commands). For a pipeline that must not run twice: a group read, the
// creation of a read guard, a deletion that empties a stream.
func noRetry(ctx context.Context, pipe redis.Pipeliner, key string) {
	_ = pipe.Process(ctx, redis.NewRawWriteToCmd(ctx, io.Discard, "XLEN", key))
}

// readBatchTimeout bounds a batch of reads sent for others (retries
// included): a subscription whose read rides it waits for it as it stops.
const readBatchTimeout = 10 * time.Second

// readReq is one group subscription's read: its commands, sent together
// and in order, each carrying its own reply.
type readReq struct {
	t    turn[*readReq]
	key  string
	cmds []redis.Cmder
	done chan struct{} // closed once the pipeline that carried cmds returned
	// unsynced, with Options.PublishSyncReplicas, is the error (wrapping
	// ErrNotReplicated) of a read whose pipeline's WAIT did not count
	// enough replicas: what it delivered must not be handed on yet.
	unsynced error
}

func (r *readReq) turn() *turn[*readReq] { return &r.t }

// runReads sends cmds (one subscription's non-blocking XREADGROUP and the
// XREVRANGE beside it) and returns once they are answered, each with its
// reply or error. Concurrent calls are coalesced as publishes are (see
// combiner): when fewer than readMaxActive batches are in flight the
// caller sends its commands at once, on ctx; otherwise they go out with
// everything queued meanwhile in the next pipeline, on a context of its own
// (readBatchTimeout). So many subscriptions reading at once cost a few
// round trips, not one each.
//
// When ctx (the subscription's) ends, a read still queued leaves the queue
// and runReads returns ctx's error: it never ran, and its replies must not
// be read. A read already sent is waited for, so that the subscription
// sees what it delivered and hands it back as it stops (cleanup) with its
// delivery count undone, and a successor that claims what is pending finds
// it. That wait is one round trip, or on a server that stopped answering
// the go-redis timeout of a batch (bounded by readBatchTimeout). go-redis
// never retries a read pipeline (each read carries a command it must not
// retry; groupSub.readLoop). A read whose reply is lost all the same (a
// timeout after the server ran it) leaves its entries pending on the
// consumer: a running subscription finds them with its next reads
// (recoverLost); a stopping one's cleanup keeps the consumer for them
// (delete_consumer.lua checks and deletes in one step) until a claim moves
// them.
//
// key is the stream read: on a Cluster the read is batched with the reads
// of streams on the same master (lanes).
//
// With Options.PublishSyncReplicas, the pipeline ends with WAIT on the
// connection that carried the reads (on a Cluster, one pipeline per
// master), and a read sent whose WAIT did not count enough replicas returns
// an error wrapping ErrNotReplicated: it ran, and what it delivered is
// pending on the consumer, but a failover could still make it undelivered
// (its delivery count back to 0), so the caller hands nothing of it on and
// treats it as a read whose reply was lost (recoverLost finds its entries
// with a later read, whose WAIT covers this one's delivery too).
func (s *streamBus) runReads(ctx context.Context, key string, cmds []redis.Cmder) error {
	s.b.awaitSlotMap(ctx)
	if err := ctx.Err(); err != nil {
		return err // never sent
	}
	r := &readReq{key: key, cmds: cmds, done: make(chan struct{})}
	q := s.readQ.lane(s.b.laneOf(key))
	if q.join(r, readMaxActive) {
		s.sendReads(ctx, []*readReq{r})
		q.finish(readMaxBatch)
		return r.unsynced
	}
	batch, sent, err := q.await(ctx, r, readMaxBatch, s.sendReadBatch)
	if err != nil {
		if !sent {
			return err // left the queue: never sent
		}
		<-r.done // in a batch: sent, or being sent by whoever leads it
		return r.unsynced
	}
	if batch != nil {
		s.sendReadBatch(batch)
		q.answered(batch, r)
		q.finish(readMaxBatch)
	}
	return r.unsynced
}

// sendReadBatch sends a batch that queued behind a leader, on a context of
// its own: a caller that gives up must not fail the others.
func (s *streamBus) sendReadBatch(batch []*readReq) {
	ctx, cancel := context.WithTimeout(context.Background(), readBatchTimeout)
	defer cancel()
	s.sendReads(ctx, batch)
}

// sendReads sends the commands of batch in one pipeline; each command
// carries its own reply or error. Then it marks each request done.
func (s *streamBus) sendReads(ctx context.Context, batch []*readReq) {
	if s.b.opts.PublishSyncReplicas > 0 {
		s.sendReadsSynced(ctx, batch)
	} else {
		p := s.b.client.Pipeline()
		for _, r := range batch {
			for _, c := range r.cmds {
				_ = p.Process(ctx, c)
			}
		}
		s.b.execPipe(ctx, p)
	}
	for _, r := range batch {
		close(r.done)
	}
}

// sendReadsSynced is sendReads with Options.PublishSyncReplicas: the reads
// of each master (one on a *redis.Client; on a *redis.ClusterClient, split
// by master as syncedPipeline splits publishes, each part on that master's
// own client, not following MOVED; ASK is followed by execSynced) go in
// one pipeline ending with
// WAIT, the parts concurrently, and each read of a part whose WAIT failed
// or counted fewer replicas gets that part's error in unsynced. A read
// whose master cannot be found gets that error on each of its commands.
func (s *streamBus) sendReadsSynced(ctx context.Context, batch []*readReq) {
	type part struct {
		conn redis.Cmdable
		addr string
		reqs []*readReq
	}
	var parts []*part
	byAddr := map[string]*part{}
	for _, r := range batch {
		conn, err := s.b.masterConn(ctx, r.key)
		if err != nil {
			for _, c := range r.cmds {
				c.SetErr(err)
			}
			continue
		}
		addr := conn.Options().Addr
		if byAddr[addr] == nil {
			byAddr[addr] = &part{conn: conn, addr: addr}
			parts = append(parts, byAddr[addr])
		}
		byAddr[addr].reqs = append(byAddr[addr].reqs, r)
	}
	send := func(p *part) {
		pipe := p.conn.Pipeline()
		for _, r := range p.reqs {
			for _, c := range r.cmds {
				_ = pipe.Process(ctx, c)
			}
		}
		wait := redis.NewIntCmd(ctx, "wait", s.b.opts.PublishSyncReplicas, s.b.opts.PublishSyncTimeout.Milliseconds())
		_ = pipe.Process(ctx, wait)
		where := s.b.execSynced(ctx, pipe, p.addr, wait)
		if err := s.notReplicated(&syncPart{addr: where, wait: wait}); err != nil {
			for _, r := range p.reqs {
				r.unsynced = fmt.Errorf("redisstreams: read of %q: %w", r.key, err)
			}
		}
	}
	if len(parts) == 1 {
		send(parts[0])
		return
	}
	var wg sync.WaitGroup
	for _, p := range parts {
		wg.Go(func() { send(p) })
	}
	wg.Wait()
}
