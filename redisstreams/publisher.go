package redisstreams

import (
	"cmp"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/keys"
)

var (
	//go:embed lua/publish_for.lua
	publishForLua string
	// Sent in full with every PublishFor (EVAL): without its comments.
	publishForScript = redis.NewScript(luaCode(publishForLua))
)

// pubMaxActive is how many publish batches may be in flight at once. One
// measured best on two cores: while a pipeline waits for its replies the
// queue fills, so the next pipeline is larger. On Cluster, go-redis sends
// each pipeline's per-node parts in parallel.
const pubMaxActive = 1

// pubReq is one XADD to send; its sender sets err.
type pubReq struct {
	t      turn[*pubReq]
	lane   *combiner[*pubReq] // the lane it joined (failQueuedAfter)
	key    string
	fields []string
	group  string // create this group first, at "$", if missing (PublishFor)
	trim   bool   // also trim the stream (trim.lua), in the same round trip
	err    error
	id     string // the entry's id, once written (also when not replicated)
	// then are more XADDs sent right after this one, in the same pipeline
	// and in order (PublishBatch); each gets its own err.
	then []*pubReq
}

// unit returns r and the requests it carries, in pipeline order.
func (r *pubReq) unit() []*pubReq {
	if len(r.then) == 0 {
		return []*pubReq{r}
	}
	return append([]*pubReq{r}, r.then...)
}

// keys returns the streams of r and of the requests it carries.
func (r *pubReq) keys() []string {
	if len(r.then) == 0 {
		return []string{r.key}
	}
	ks := make([]string, 0, 1+len(r.then))
	ks = append(ks, r.key)
	for _, x := range r.then {
		ks = append(ks, x.key)
	}
	return ks
}

// firstErr returns the first error among r and the requests it carries
// (naming its place when r carries more). Only once they were answered.
func (r *pubReq) firstErr() error {
	unit := r.unit()
	for i, x := range unit {
		if x.err != nil {
			if len(unit) == 1 {
				return x.err
			}
			return fmt.Errorf("redisstreams: publication %d of %d: %w", i, len(unit), x.err)
		}
	}
	return nil
}

func (r *pubReq) turn() *turn[*pubReq] { return &r.t }

// publish sends one XADD of fields on the stream key and returns once Redis
// has replied to it, or when ctx ends. Concurrent calls are coalesced (see
// combiner): when no batch is in flight the caller writes its XADD at once,
// on ctx (itself when ctx cannot end, else from a goroutine of its own that
// it waits for); otherwise it queues, and everything queued while the
// current batch is in flight goes out as the next pipeline (up to BatchSize
// commands), sent by that goroutine or by the first queued caller; each
// caller gets its own command's result.
func (s *streamBus) publish(ctx context.Context, key, group string, fields []string) error {
	return s.publishUnit(ctx, &pubReq{key: key, fields: fields, group: group, trim: s.trimDue()})
}

// publishUnit sends r and the requests it carries (r.then) in one pipeline,
// coalesced with concurrent publishes as publish describes, and returns the
// first error among them. When ctx ends first it returns that error and the
// requests' own errors must not be read: a pipeline may still be writing
// them.
func (s *streamBus) publishUnit(ctx context.Context, r *pubReq) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.b.awaitSlotMap(ctx)
	if err := ctx.Err(); err != nil {
		return err
	}
	q, bs := s.pubQ.lane(s.b.laneOfReq(r)), s.b.opts.BatchSize
	r.lane = q
	if q.join(r, pubMaxActive) {
		if ctx.Done() == nil { // ctx cannot end: no goroutine needed
			s.send(ctx, r)
			q.finish(bs)
			return r.firstErr()
		}
		// On a ctx that can end the leader sends from a goroutine of its
		// own, which then goes on sending what queued meanwhile
		// (sendQueued), so that this caller returns when ctx ends, also
		// while the write waits for a server that stopped answering
		// (go-redis does not end a blocked read when ctx is cancelled).
		// r's turn.wake, unused by a leader, tells when the send is done.
		done := r.t.wake
		if s.b.awaitSend(ctx, done, func() {
			s.send(ctx, r)
			close(done)
			s.sendQueued(q)
		}) {
			return endedWith(ctx, r.firstErr())
		}
		return s.mayBeStored(ctx, r)
	}
	batch, sent, err := q.await(ctx, r, bs, s.sendBatch)
	switch {
	case err != nil && !sent:
		return err
	case err != nil:
		return s.mayBeStored(ctx, r)
	case batch != nil:
		// Handed a batch to lead (by a leader whose ctx could not end): as
		// above, from a goroutine of its own when ctx can end.
		if ctx.Done() == nil {
			s.sendBatch(batch)
			q.answered(batch, r)
			q.finish(bs)
			break
		}
		done := make(chan struct{})
		if !s.b.awaitSend(ctx, done, func() {
			s.sendBatch(batch)
			q.answered(batch, r)
			close(done)
			s.sendQueued(q)
		}) {
			return s.mayBeStored(ctx, r)
		}
	}
	return endedWith(ctx, r.firstErr())
}

// mayBeStored returns the error of a publish whose ctx ended after its
// write was handed on: the event may have been stored, or may still be.
func (s *streamBus) mayBeStored(ctx context.Context, r *pubReq) error {
	return fmt.Errorf("redisstreams: publish to %q: %w (the event may have been stored)", r.key, ctx.Err())
}

// sendQueued is the rest of the turn of a leader that sends from a goroutine
// of its own (publishUnit on a ctx that can end): while publishes are
// queued in its lane q it sends them in batches and answers them, then
// frees the slot.
func (s *streamBus) sendQueued(q *combiner[*pubReq]) {
	bs := s.b.opts.BatchSize
	for batch := q.next(bs); batch != nil; batch = q.next(bs) {
		s.sendBatch(batch)
		q.answered(batch, nil)
	}
}

// xaddArgs returns the XADD of r. It does not trim: retention is kept by
// trim.lua (retention.go), which never removes an entry a group still needs.
func (s *streamBus) xaddArgs(r *pubReq) *redis.XAddArgs {
	return &redis.XAddArgs{
		Stream: r.key,
		Values: r.fields,
	}
}

// send writes one request alone: its XADD and, when StreamIdleTTL is set, a
// PEXPIRE of the stream, when due a trim, and with PublishSyncReplicas a
// WAIT (see pipeline), in one round trip.
func (s *streamBus) send(ctx context.Context, r *pubReq) {
	if s.b.opts.StreamIdleTTL > 0 || r.trim || r.group != "" || len(r.then) > 0 || s.b.opts.PublishSyncReplicas > 0 {
		s.pipeline(ctx, []*pubReq{r})
		return
	}
	seq := s.deletions()
	cmd := s.b.client.XAdd(ctx, s.xaddArgs(r))
	s.b.reloadOnFailure(ctx, cmd) // as the pipelines do (execPipe)
	id, err := cmd.Result()
	s.answer(r, id, err, seq)
	s.failQueuedAfter(ctx, []*pubReq{r})
}

// failQueuedAfter fails the publishes queued behind batch, which was just
// sent on ctx, when it failed on a transport error (the server did not
// answer within the client's timeouts, or the connection broke, after
// go-redis's retries) that ctx's deadline did not cause (a client that
// honours ctx deadlines reads only until then; a cancel does not cut a
// read short, so a cancelled ctx's timeout is the server's): they were not sent,
// and would each wait for the same timeouts in turn, one batch after
// another (TestQueuedPublishesFailWithTheBatchBefore: the last of 160
// publishes on a stopped server returned after 45s with go-redis's
// defaults, now after 5.0s). Their callers get an error saying so: the
// event was not stored, and may be published again.
func (s *streamBus) failQueuedAfter(ctx context.Context, batch []*pubReq) {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return // the sender's deadline may be what timed out
	}
	var (
		cause error
		scope failScope
	)
	for _, r := range batch {
		for _, x := range r.unit() {
			if x.err != nil && isNetErr(x.err) {
				cause = cmp.Or(cause, x.err)
				scope.add(s.b, x.key)
			}
		}
	}
	if cause == nil {
		return
	}
	// The lane the batch was taken from: the one its requests joined (not
	// the lane their keys have now: the client's map of slots may have
	// been loaded, or have changed, since; TestFreshClusterClientQueuedFailFast).
	q := batch[0].lane
	if q == nil {
		return
	}
	q.failQueued(func(r *pubReq) bool {
		for _, x := range r.unit() {
			if scope.has(s.b, x.key) {
				return true
			}
		}
		return false
	}, func(r *pubReq) {
		for _, x := range r.unit() {
			x.err = fmt.Errorf("redisstreams: publish to %q not sent (retry it): the publish before it failed: %w", x.key, cause)
		}
	})
}

// failScope is where a batch failed on a transport error: on a Cluster
// client, the nodes of the keys that failed (a batch is sent in one part
// per node, and one node's failure says nothing of the others), on a Ring,
// their hash tags (their shards), on any other client everything. The calls
// queued in that scope fail with the batch (TestClusterStalledMasterSparesOtherNodes:
// with the whole queue failed, calls for healthy masters failed as "not
// sent"; by node, they are spared).
type failScope map[string]struct{}

// where returns the scope key of key and whether the client is sharded:
// its master's address on a Cluster ("" when the client's map of slots
// cannot tell, which matches nothing), its hash tag on a Ring; on any other
// client, not sharded.
func (b *Backend) where(key string) (string, bool) {
	switch b.client.(type) {
	case *redis.ClusterClient:
		return b.masterOf(key), true
	case *redis.Ring:
		return keys.HashTag(key), true
	}
	return "", false
}

// masterOf returns the address of key's master as the Cluster client's map
// of slots has it, or "" when the client is not a Cluster client or has no
// map yet. It never sends anything: MasterForKey reads the loaded map, and
// on a client with none it tries to load one on noWait, which fails at
// once, rather than on a server that may not answer.
func (b *Backend) masterOf(key string) string {
	c, ok := b.client.(*redis.ClusterClient)
	if !ok {
		return ""
	}
	node, err := c.MasterForKey(noWait, key)
	if err != nil {
		return ""
	}
	return node.Options().Addr
}

// laneOfReq returns the lane of r and the requests it carries (laneOf).
func (b *Backend) laneOfReq(r *pubReq) string {
	if _, ok := b.client.(*redis.ClusterClient); !ok {
		return "" // (without building the list of keys)
	}
	return b.laneOf(r.keys()...)
}

// noWait is a context that has ended: a call on it sends nothing.
var noWait = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

// laneOf returns the lane (see lanes) of a call for the keys ks: on a
// Cluster client their master's address, or their masters' addresses
// joined when they are on several (such a call waits for all of them
// anyway); "" (the zero lane) on any other client and when the client's
// map of slots cannot tell.
func (b *Backend) laneOf(ks ...string) string {
	if _, ok := b.client.(*redis.ClusterClient); !ok || len(ks) == 0 {
		return ""
	}
	if len(ks) == 1 {
		return b.masterOf(ks[0])
	}
	ms := make([]string, len(ks))
	for i, k := range ks {
		if ms[i] = b.masterOf(k); ms[i] == "" {
			return ""
		}
	}
	slices.Sort(ms)
	return strings.Join(slices.Compact(ms), " ")
}

func (f *failScope) add(b *Backend, key string) {
	w, sharded := b.where(key)
	if !sharded || w == "" {
		return
	}
	if *f == nil {
		*f = failScope{}
	}
	(*f)[w] = struct{}{}
}

func (f failScope) has(b *Backend, key string) bool {
	w, sharded := b.where(key)
	if !sharded {
		return true
	}
	_, ok := f[w]
	return ok && w != ""
}

// sendBatch writes a batch that queued behind a leader. The writes are not
// tied to any caller's ctx: a caller that gives up must not fail the others.
// go-redis timeouts bound the call.
func (s *streamBus) sendBatch(batch []*pubReq) {
	ctx := context.Background()
	if len(batch) == 1 {
		s.send(ctx, batch[0])
		return
	}
	s.pipeline(ctx, batch)
}

// flatten returns the requests of batch with the ones each carries right
// after it, in pipeline order.
func flatten(batch []*pubReq) []*pubReq {
	n := 0
	for _, r := range batch {
		n += 1 + len(r.then)
	}
	if n == len(batch) {
		return batch
	}
	all := make([]*pubReq, 0, n)
	for _, r := range batch {
		all = append(all, r.unit()...)
	}
	return all
}

// pipeline writes batch in one pipeline: per request an XADD (for
// PublishFor, publish_for.lua, which creates the group at "$" first when it
// is missing, atomically: no delete_drained.lua can run in between and
// leave the entry in a new stream without the group, where a later
// PublishFor's group would start after it and never deliver it), when
// StreamIdleTTL is set a PEXPIRE of the stream, and when due a trim.lua of
// the stream (after its XADD, so the new entry counts). publish_for.lua
// goes as EVAL, never EVALSHA: a NOSCRIPT retry would put its entry after
// the ones behind it in the pipeline, and a batch's order is a promise
// (PublishBatch).
//
// With PublishSyncReplicas set it goes to syncedPipeline instead.
func (s *streamBus) pipeline(ctx context.Context, batch []*pubReq) {
	batch = flatten(batch)
	if s.b.opts.PublishSyncReplicas > 0 {
		s.syncedPipeline(ctx, batch)
		return
	}
	pipe := s.b.client.Pipeline()
	cmds, trims := s.queue(ctx, pipe, batch)
	seq := s.deletions()
	s.b.execPipe(ctx, pipe) // errors are read per command
	for i, r := range batch {
		id, err := cmds[i].Result()
		s.answer(r, id, err, seq)
	}
	failed := failedKeys(batch)
	for key, cmd := range trims {
		s.checkTrim(ctx, key, cmd, failed[key])
	}
	s.failQueuedAfter(ctx, batch)
}

// queue adds the commands of batch (flattened) to pipe, as pipeline
// describes, and returns each request's write and the trims by stream.
func (s *streamBus) queue(ctx context.Context, pipe redis.Pipeliner, batch []*pubReq) ([]interface{ Result() (string, error) }, map[string]*redis.Cmd) {
	idle := s.b.opts.StreamIdleTTL
	cmds := make([]interface{ Result() (string, error) }, len(batch))
	trims := make(map[string]*redis.Cmd)
	for i, r := range batch {
		if r.group != "" {
			args := make([]any, 0, 1+len(r.fields))
			args = append(args, r.group)
			for _, f := range r.fields {
				args = append(args, f)
			}
			cmds[i] = textCmd{publishForScript.Eval(ctx, pipe, []string{r.key}, args...)}
		} else {
			cmds[i] = pipe.XAdd(ctx, s.xaddArgs(r))
		}
		if idle > 0 {
			pipe.PExpire(ctx, r.key, max(idle, time.Millisecond))
		}
		if r.trim && trims[r.key] == nil {
			if s.trimCached.Load() {
				trims[r.key] = trimScript.EvalSha(ctx, pipe, []string{r.key}, s.trimArgs()...)
			} else {
				trims[r.key] = trimScript.Eval(ctx, pipe, []string{r.key}, s.trimArgs()...)
			}
		}
	}
	return cmds, trims
}

// luaCode returns src without its comment lines and blank lines.
func luaCode(src string) string {
	var b strings.Builder
	for line := range strings.Lines(src) {
		if t := strings.TrimSpace(line); t == "" || strings.HasPrefix(t, "--") {
			continue
		}
		b.WriteString(line)
	}
	return b.String()
}

// textCmd reads a script's reply as a string, like an XADD's.
type textCmd struct{ *redis.Cmd }

func (c textCmd) Result() (string, error) { return c.Cmd.Text() }

// answer records the outcome of r's XADD.
func (s *streamBus) answer(r *pubReq, id string, err error, seq uint64) {
	if err != nil {
		r.err = fmt.Errorf("redisstreams: xadd %q: %w", r.key, err)
		return
	}
	r.id = id
	s.wrote(r.key, id, seq)
}
