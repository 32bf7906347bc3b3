package redisstreams

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/backoff"
	"github.com/leasebus/leasebus/pubsub"
)

var (
	//go:embed lua/trim.lua
	trimLua    string
	trimScript = redis.NewScript(trimLua)
)

// trimMaxPerCall is the most entries one trim script removes (it reads them
// with XRANGE first, so this bounds the script's time and memory); a stream
// further over its retention, such as one whose slow group just caught up,
// is trimmed further by the next calls, up to four times faster than
// publishes can grow it.
const trimMaxPerCall = 1_000

// trimEvery returns 1/p of the chance that a publish also trims its stream:
// a quarter of the retention, between 1 and 256. Trimming is random rather
// than counted so that no per-stream state is kept and no stream is skipped.
func (s *streamBus) trimEvery() int {
	return min(max(s.b.opts.Retention/4, 1), 256)
}

// trimDue reports whether a publish should trim its stream.
func (s *streamBus) trimDue() bool {
	if s.b.opts.Retention == pubsub.RetainAll {
		return false
	}
	n := s.trimEvery()
	return n == 1 || rand.IntN(n) == 0
}

// trimArgs returns the arguments of trim.lua for this Backend.
func (s *streamBus) trimArgs() []any {
	return []any{s.b.opts.Retention, trimMaxPerCall}
}

// checkTrim reads the outcome of a trim sent in a pipeline. The pipeline
// sends the script as EVAL until it is known cached; a server that lost it
// meanwhile (NOSCRIPT) runs it again with EVAL (which caches it);
// other errors are logged: the event was stored, only its stream stays
// longer until the next trim. writeFailed says that a write to the same
// stream in that pipeline failed: its caller got that error, and a trim
// that failed with it (the server stopped answering, the connection broke)
// is not logged a second time, nor run again after NOSCRIPT (that write
// did not grow the stream; a later publish trims it).
// TestFailedPublishLogsNoTrimWarning.
func (s *streamBus) checkTrim(ctx context.Context, key string, cmd *redis.Cmd, writeFailed bool) {
	err := cmd.Err()
	if err != nil && isNoScript(err) {
		s.trimCached.Store(false) // the next trim goes as EVAL
		if writeFailed {
			return
		}
		err = trimScript.Run(ctx, s.b.client, []string{key}, s.trimArgs()...).Err()
	}
	if err == nil {
		s.trimCached.Store(true)
	}
	if err != nil && !writeFailed {
		s.b.opts.Logger.Warn("redisstreams: trimming a stream failed; it is trimmed again on a later publish", "stream", key, "err", err)
	}
}

// failedKeys returns the streams of reqs that a write failed to, or nil
// (a write that was stored but not replicated, ErrNotReplicated, did not
// fail).
func failedKeys(reqs []*pubReq) map[string]bool {
	var failed map[string]bool
	for _, r := range reqs {
		if r.err == nil || errors.Is(r.err, ErrNotReplicated) {
			continue
		}
		if failed == nil {
			failed = make(map[string]bool)
		}
		failed[r.key] = true
	}
	return failed
}

// trim runs trim.lua on the stream key once and returns how many entries it
// removed.
func (s *streamBus) trim(ctx context.Context, key string) (int64, error) {
	n, err := trimScript.Run(ctx, s.b.client, []string{key}, s.trimArgs()...).Int64()
	if err != nil {
		return 0, fmt.Errorf("redisstreams: trim %q: %w", key, err)
	}
	return n, nil
}

// DeleteTopic deletes the stream of topic with its consumer groups, their
// positions and pending entries (pubsub.TopicDeleter): one script, and a
// second one a millisecond later when the stream's last entry was added in
// the current millisecond (then the first empties it, and the second
// deletes it if it is still empty and has no group: see delete_topic.lua;
// so a stream created again numbers its entries above every id the old one
// had, and no reader skips them). When the server's clock is more than
// 50ms behind the stream's last id, the stream is left emptied and without
// groups, keeping its last id, rather than waited for. Live
// subscriptions keep running: a group member finds its group gone
// (NOGROUP), recreates it and receives the events published after the
// deletion; an entry one of them had read and not acked is not delivered
// again; fan-out readers go on with the new entries, and a fan-out
// delivery in flight that fails is not delivered again
// (TestReviewH76DeleteTopicFanoutInFlightNackNotRedelivered). Other
// processes' subscriptions behave the same, except that a fan-out
// subscription of another Backend cannot tell that its topic was deleted
// and retries a failed delivery from its own copy, as usual
// (TestReviewH76DeleteTopicByPeerFanoutRetries). The dead-letter topic is
// left alone. It
// returns nil also when the topic did not exist; an error wrapping
// pubsub.ErrInvalid for an empty topic; pubsub.ErrClosed after Close; the
// Redis error otherwise.
//
// It returns when ctx ends, also on a server that stopped answering, with
// an error wrapping ctx's that says the deletion was sent and may have run
// (redisstreams/doc.go, "Clients and deadlines"). Such a deletion, like
// one whose reply was lost to a timeout or a cut connection, may still run
// when the server answers again, and then also deletes what was published
// to the topic meanwhile (TestDeleteTopicLateReplyNoRace shows such a
// deletion run after the resume); nothing here tells when, or whether, it
// ran.
func (b *Backend) DeleteTopic(ctx context.Context, topic string) error {
	if err := b.bus.enter(); err != nil {
		return err
	}
	defer b.bus.leave()
	if err := pubsub.ValidateTopic(topic); err != nil {
		return err
	}
	key := b.keys.Stream(topic)
	written := b.bus.lastWrite(key) // before the deletion: gone with it
	first := "1"
	for {
		wait, err := b.deleteTopicStep(ctx, key, first, written)
		if err != nil {
			return fmt.Errorf("redisstreams: delete topic %q: %w", topic, err)
		}
		if wait <= 0 {
			return nil
		}
		if wait > deleteTopicMaxWait.Milliseconds() {
			// The server's clock is behind the stream's ids (a failover
			// to a server whose clock lags, say): the stream stays,
			// emptied and without groups, keeping its last id, until a
			// later DeleteTopic or StreamIdleTTL removes it.
			return nil
		}
		// Emptied within the millisecond of its last entry: deleted once
		// the server's clock passed it (delete_topic.lua).
		first = "0"
		if err := backoff.Sleep(ctx, time.Duration(wait)*time.Millisecond); err != nil {
			return fmt.Errorf("redisstreams: delete topic %q: emptied, not yet deleted: %w", topic, err)
		}
	}
}

// deleteTopicStep runs delete_topic.lua once on key (first: "1" for the
// call that empties the stream, "0" for the one that deletes it once the
// server's clock passed its last id) and returns how long to wait before
// the next call (0: done). It returns when ctx ends, also on a server that
// stopped answering (TestNamedCallsReturnAtCancelOnStalledServer): the
// script goes on in a goroutine of its own (awaitSend), which also does
// what the first call's reply calls for here (the local subscriptions
// caught up with what it deleted, Flush no longer waiting for it), so that
// a deletion the server runs after the caller gave up leaves nothing
// behind in this process.
func (b *Backend) deleteTopicStep(ctx context.Context, key, first, written string) (int64, error) {
	// The step's own results: read by the caller only once step is over
	// (ctx may end first, and step go on alone).
	var (
		wait int64
		err  error
	)
	step := func() {
		for {
			// With a command go-redis never retries: a retried first call
			// could empty what was published after the first one ran.
			pipe := b.client.Pipeline()
			noRetry(ctx, pipe, key)
			del := pipe.EvalSha(ctx, deleteTopicScript.Hash(), []string{key}, first)
			_, _ = pipe.Exec(ctx)
			var last string
			wait, last, err = deleteTopicReply(del)
			if isNoScript(err) {
				if err = deleteTopicScript.Load(ctx, b.client).Err(); err != nil {
					return
				}
				continue
			}
			if err != nil {
				return
			}
			if first == "1" && written != "" {
				b.bus.forgetWrites(key, written) // gone: no Flush waits for them
			}
			if first == "1" && last != "" {
				// Entries up to last are gone, read or not: a local fan-out
				// subscription that had not read them is caught up with them
				// once its reader finished the reads it had started (one of
				// those may bring some, to be handled first).
				b.bus.deletedUpTo(key, last)
			}
			return
		}
	}
	if ctx.Done() == nil { // ctx cannot end: no goroutine needed
		step()
		return wait, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err // nothing sent
	}
	done := make(chan struct{})
	if !b.awaitSend(ctx, done, func() {
		step()
		close(done)
	}) {
		return 0, fmt.Errorf("%w (the deletion was sent and may have run)", ctx.Err())
	}
	return wait, endedWith(ctx, err)
}

// deleteTopicReply reads delete_topic.lua's {wait, last} reply.
func deleteTopicReply(cmd *redis.Cmd) (wait int64, last string, err error) {
	v, err := cmd.Result()
	if err != nil {
		return 0, "", err
	}
	pair, ok := v.([]any)
	if !ok || len(pair) != 2 {
		return 0, "", fmt.Errorf("unexpected reply %v", v)
	}
	wait, ok = pair[0].(int64)
	if !ok {
		return 0, "", fmt.Errorf("unexpected reply %v", v)
	}
	last, _ = pair[1].(string)
	return wait, last, nil
}

// deleteTopicMaxWait bounds how long DeleteTopic waits for the server's
// clock to pass the stream's last id before it deletes the emptied stream.
const deleteTopicMaxWait = 50 * time.Millisecond

var (
	//go:embed lua/delete_topic.lua
	deleteTopicLua    string
	deleteTopicScript = redis.NewScript(deleteTopicLua)
)
