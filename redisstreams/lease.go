package redisstreams

import (
	"cmp"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/leasebus/leasebus/lease"
)

// Lease layout. The lease on key k is the string key b.keys.Lease(k) holding
// the owner, with a PX expiry set by the server; its fencing counter is
// b.keys.Fence(k), an integer in the same hash slot, which this package
// raises only when a new tenure starts (acquire of a free key, transfer),
// to max(counter + 1, the server's clock in microseconds). So the counter's
// value is always the token of the live lease, if any, and is read from
// there; the lease value needs no parsing. The counter expires
// Options.FenceIdle after the lease could last (acquire, renew and transfer
// push that back, so it always outlives the lease): a key idle that long
// leaves no key behind, and its next tenure's token, taken from the clock,
// is still above every earlier one (each earlier token is at most its
// tenure's start in microseconds, plus the few tenures that started within
// the same microsecond), unless the server's clock went back by more than
// FenceIdle.
//
// Every operation is one Lua script run with EVALSHA (EVAL when the server
// answers NOSCRIPT); expiry is counted by the server's clock only. Scripts
// of concurrent single-lease calls are coalesced into pipelines (see
// Backend.runLease): each is still one script and one round trip, shared.

var (
	//go:embed lua/acquire.lua
	acquireLua    string
	acquireScript = newLuaScript(acquireLua)

	//go:embed lua/renew.lua
	renewLua    string
	renewScript = newLuaScript(renewLua)

	//go:embed lua/renew_many.lua
	renewManyLua    string
	renewManyScript = newLuaScript(renewManyLua)

	//go:embed lua/release.lua
	releaseLua    string
	releaseScript = newLuaScript(releaseLua)

	//go:embed lua/transfer.lua
	transferLua    string
	transferScript = newLuaScript(transferLua)

	//go:embed lua/owner.lua
	ownerLua    string
	ownerScript = newLuaScript(ownerLua)

	//go:embed lua/inspect.lua
	inspectLua    string
	inspectScript = newLuaScript(inspectLua)
)

// luaScript is a lease script and its SHA1 digest.
type luaScript struct{ src, sha string }

// scriptHints records, per Backend, the scripts last seen cached on its
// server (ran, rather than answered NOSCRIPT). It is only a hint: a batch of
// a script not known to be cached sends its first pipeline alone, so that
// the others find the script cached instead of each falling back to EVAL.
type scriptHints struct{ m sync.Map } // *luaScript → struct{}

func (h *scriptHints) cached(s *luaScript) bool {
	_, ok := h.m.Load(s)
	return ok
}

// note records whether the server ran s (err is the outcome of running it).
func (h *scriptHints) note(s *luaScript, err error) {
	switch {
	case isNoScript(err):
		h.m.Delete(s)
	case err == nil || errors.Is(err, redis.Nil):
		if !h.cached(s) {
			h.m.Store(s, struct{}{})
		}
	}
}

func newLuaScript(src string) *luaScript {
	return &luaScript{src: src, sha: redis.NewScript(src).Hash()}
}

// PipelineChunk is the largest number of scripts RenewLeases and ListLeases
// send in one pipeline, and the most leases one renew_many.lua call renews.
// On a standalone or Sentinel client 10,000 renewals are 10 scripts sent in
// one pipeline; on a Cluster, at most 10 pipelines per node, run in parallel
// across nodes.
const PipelineChunk = 1000

const (
	// leaseMaxActive is how many batches of single-lease scripts may be in
	// flight at once; further calls queue and go in the next batch.
	leaseMaxActive = 2
	// leaseMaxBatch is the most scripts in one coalesced batch.
	leaseMaxBatch = 256
)

// leaseCall is one lease script to run: its EVALSHA command, which holds
// the reply once sent.
type leaseCall struct {
	t      turn[*leaseCall]
	script *luaScript
	cmd    *redis.Cmd
	key    string                // KEYS[1] (failScope)
	lane   *combiner[*leaseCall] // the lane it joined (failLeaseQueueAfter)
}

func (c *leaseCall) turn() *turn[*leaseCall] { return &c.t }

// newCall builds an EVALSHA of s with keys and argv.
func newCall(ctx context.Context, s *luaScript, keys []string, argv ...any) *leaseCall {
	args := make([]any, 0, 3+len(keys)+len(argv))
	args = append(args, "evalsha", s.sha, len(keys))
	for _, k := range keys {
		args = append(args, k)
	}
	args = append(args, argv...)
	c := &leaseCall{script: s, cmd: redis.NewCmd(ctx, args...)}
	if len(keys) > 0 {
		c.key = keys[0]
	}
	return c
}

// runLease runs one lease script and returns its command, holding the reply
// or the error. When fewer than leaseMaxActive batches are in flight the
// caller sends it at once, on ctx; otherwise it joins the next coalesced
// batch (sent on a context of its own, bounded by the client's timeouts) and
// waits for it or for ctx. Either way it returns when ctx ends, also while
// the script waits for a server that stopped answering (go-redis does not
// end a blocked read when its ctx is cancelled): the script may or may not
// have run then, and the error says so (see mayHaveRun).
func (b *Backend) runLease(ctx context.Context, c *leaseCall) *redis.Cmd {
	if err := ctx.Err(); err != nil {
		return notSentCmd(ctx, err) // nothing sent, as go-redis would send nothing
	}
	b.awaitSlotMap(ctx)
	if err := ctx.Err(); err != nil {
		return notSentCmd(ctx, err)
	}
	q := b.leaseQ.lane(b.laneOf(c.key))
	c.lane = q
	if q.join(c, leaseMaxActive) {
		if ctx.Done() == nil { // ctx cannot end: no goroutine needed
			b.sendLead(ctx, c)
			q.finish(leaseMaxBatch)
			return c.cmd
		}
		// c's turn.wake, unused by a leader, tells when the send is done.
		// The goroutine then goes on sending what queued meanwhile
		// (sendQueued), rather than wake a queued caller to lead it.
		done := c.turn().wake
		if b.awaitSend(ctx, done, func() {
			b.sendLead(ctx, c)
			close(done)
			b.sendQueued(q)
		}) {
			return cmdEndedWith(ctx, c.cmd)
		}
		return mayHaveRun(ctx)
	}
	batch, sent, err := q.await(ctx, c, leaseMaxBatch, b.sendLeaseBatch)
	switch {
	case err != nil:
		if sent {
			return mayHaveRun(ctx)
		}
		return notSentCmd(ctx, err) // left the queue: never sent
	case batch != nil:
		// Handed a batch to lead (by a leader whose ctx could not end):
		// send it, answer its other callers and hand on the turn. On a ctx
		// that can end this runs in a goroutine of its own, as a lone send
		// does, so that this caller returns when ctx ends, also while the
		// batch waits for a server that stopped answering (the others wait
		// on their own ctx); that goroutine goes on sending what queued
		// meanwhile.
		if ctx.Done() == nil {
			b.sendLeaseBatch(batch)
			q.answered(batch, c)
			q.finish(leaseMaxBatch)
			return c.cmd
		}
		done := make(chan struct{})
		if !b.awaitSend(ctx, done, func() {
			b.sendLeaseBatch(batch)
			q.answered(batch, c)
			close(done)
			b.sendQueued(q)
		}) {
			return mayHaveRun(ctx)
		}
	}
	return cmdEndedWith(ctx, c.cmd)
}

// sendQueued is the rest of the turn of a leader that sends from a goroutine
// of its own (runLease on a ctx that can end): while calls are queued in
// its lane q it sends them in batches and answers them, then frees the
// slot. A caller never waits on it to lead, so each such turn costs one
// goroutine however many batches it sends.
func (b *Backend) sendQueued(q *combiner[*leaseCall]) {
	for batch := q.next(leaseMaxBatch); batch != nil; batch = q.next(leaseMaxBatch) {
		b.sendLeaseBatch(batch)
		q.answered(batch, nil)
	}
}

// mayHaveRun returns a command failed with ctx's error, for a script that
// was sent (or handed to a goroutine that sends it) when ctx ended: the
// server may have run it, or may still.
func mayHaveRun(ctx context.Context) *redis.Cmd {
	return failedCmd(ctx, fmt.Errorf("%w (the script was sent and may have run)", ctx.Err()))
}

// notSentCmd returns a command failed with err, for a script never sent:
// the error matches lease.ErrNotSent too.
func notSentCmd(ctx context.Context, err error) *redis.Cmd {
	return failedCmd(ctx, fmt.Errorf("%w (%w)", err, lease.ErrNotSent))
}

// failedCmd returns a command failed with err.
func failedCmd(ctx context.Context, err error) *redis.Cmd {
	cmd := redis.NewCmd(ctx)
	cmd.SetErr(err)
	return cmd
}

// awaitSend runs send in a goroutine of its own (send closes done when it
// is over) and reports whether it was over before ctx ended. It returns
// false as soon as ctx ends: send then goes on alone until the client
// answers or gives up (its timeouts, or Close of a client NewURL made, which
// closes its connections), and the caller must not touch what send writes
// (read the command only after a true). The goroutine is counted in b.late,
// which Shutdown waits for.
func (b *Backend) awaitSend(ctx context.Context, done <-chan struct{}, send func()) bool {
	b.late.add()
	go func() {
		defer b.late.done()
		send()
	}()
	select {
	case <-done:
		return true
	case <-ctx.Done():
		select {
		case <-done: // both at once: the answer is there, take it
			return true
		default:
			return false
		}
	}
}

// endedWith returns err, also wrapping ctx's error when ctx has ended by
// now: a call that awaitSend saw finish may have failed because ctx ended,
// on a client whose read deadline is ctx's (ContextTimeoutEnabled, as
// NewURL's), whose timeout may come an instant before ctx reports its end
// (a bare i/o timeout in 3 of 6 runs: TestNamedCallsReturnAtCancelOnStalledServer).
func endedWith(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	cerr := ctx.Err()
	if dl, ok := ctx.Deadline(); cerr == nil && ok && !time.Now().Before(dl) {
		cerr = context.DeadlineExceeded
	}
	if cerr == nil || errors.Is(err, cerr) {
		return err
	}
	return fmt.Errorf("%w (%w)", err, cerr)
}

// cmdEndedWith returns cmd, or when its error is to wrap ctx's as well
// (endedWith), a command failed with that.
func cmdEndedWith(ctx context.Context, cmd *redis.Cmd) *redis.Cmd {
	if err := cmd.Err(); err != nil {
		if e := endedWith(ctx, err); e != err {
			return failedCmd(ctx, e)
		}
	}
	return cmd
}

// sendCtx sends c alone as sendCall does and returns its command, or, when
// ctx ends first, a command holding the error of mayHaveRun (see awaitSend).
func (b *Backend) sendCtx(ctx context.Context, c *leaseCall) *redis.Cmd {
	if ctx.Done() == nil { // ctx cannot end: no goroutine needed
		b.sendCall(ctx, c)
		return c.cmd
	}
	if err := ctx.Err(); err != nil {
		return notSentCmd(ctx, err) // nothing sent, as go-redis would send nothing
	}
	done := make(chan struct{})
	if b.awaitSend(ctx, done, func() {
		b.sendCall(ctx, c)
		close(done)
	}) {
		return cmdEndedWith(ctx, c.cmd)
	}
	return mayHaveRun(ctx)
}

// sendCall sends one script alone, and again as EVAL when the server has
// not cached it. It waits for the answer or for the client to give up,
// whatever ctx does: see sendCtx for a send that returns when ctx ends.
func (b *Backend) sendCall(ctx context.Context, c *leaseCall) {
	_ = b.client.Process(ctx, c.cmd)
	if isNoScript(c.cmd.Err()) {
		b.hints.note(c.script, c.cmd.Err())
		c.cmd = c.eval(ctx)
		_ = b.client.Process(ctx, c.cmd)
	}
	b.hints.note(c.script, c.cmd.Err())
	b.reloadOnFailure(ctx, c.cmd)
}

// eval returns c's command as an EVAL of the script's source.
func (c *leaseCall) eval(ctx context.Context) *redis.Cmd {
	args := slices.Clone(c.cmd.Args())
	args[0], args[1] = "eval", c.script.src
	return redis.NewCmd(ctx, args...)
}

// sendLeaseBatch sends a coalesced batch, on a context of its own: a caller
// that gives up must not fail the others; go-redis timeouts bound the call.
// Then it fails the calls queued meanwhile if the batch failed on a
// transport error (failLeaseQueueAfter).
func (b *Backend) sendLeaseBatch(batch []*leaseCall) {
	ctx := context.Background()
	b.sendCalls(ctx, batch)
	b.failLeaseQueueAfter(ctx, batch)
}

// sendLead sends c alone for a leader of the lease combiner, as sendCall
// does, then fails the calls queued meanwhile if it failed on a transport
// error (failLeaseQueueAfter).
func (b *Backend) sendLead(ctx context.Context, c *leaseCall) {
	b.sendCall(ctx, c)
	b.failLeaseQueueAfter(ctx, []*leaseCall{c})
}

// failLeaseQueueAfter fails the lease calls queued behind batch, which was
// just sent on ctx, when it failed on a transport error that ctx's deadline
// did not cause, as the publishes' failQueuedAfter does: they were never
// sent (so never ran), and would each wait for the same timeouts in turn
// (TestQueuedLeaseCallsFailWithTheBatchBefore: 160 AcquireLease calls on a
// stopped server returned after 45s with go-redis's defaults, now within
// one batch's timeouts). A batch still in flight beside it answers for
// itself.
func (b *Backend) failLeaseQueueAfter(ctx context.Context, batch []*leaseCall) {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return // the sender's deadline may be what timed out
	}
	var (
		cause error
		scope failScope
	)
	for _, c := range batch {
		if err := c.cmd.Err(); err != nil && isNetErr(err) {
			cause = cmp.Or(cause, err)
			scope.add(b, c.key)
		}
	}
	if cause == nil {
		return
	}
	// The lane the batch was taken from (see failQueuedAfter).
	q := batch[0].lane
	if q == nil {
		return
	}
	q.failQueued(func(c *leaseCall) bool { return scope.has(b, c.key) }, func(c *leaseCall) {
		c.cmd.SetErr(fmt.Errorf("redisstreams: lease script not sent (it did not run; %w): the call before it failed: %w", lease.ErrNotSent, cause))
	})
}

// pipelineCalls sends calls in one pipeline; those the server answers
// NOSCRIPT are sent again, as EVAL, in a second one. Each command carries its
// own reply or error.
//
// On a Cluster, calls are cut per master (byMaster), each run sent in that
// master's own pipeline (pipelineOn), and the calls it answers MOVED or ASK
// are sent again one at a time through the ClusterClient, which follows the
// redirection (followRedirects); only calls whose master the client's map
// cannot tell go in a ClusterClient pipeline. That is not used otherwise:
// go-redis v9.23 sends a command of one again to two nodes at once, racing
// on its reply, when the pipeline's first command on a node is answered
// TRYAGAIN and another was redirected, as lease calls of a migrating slot
// are (TestLeaseCallsRideThroughSlotMove found it under -race).
func (b *Backend) pipelineCalls(ctx context.Context, calls []*leaseCall) {
	parts := b.byMaster(calls)
	if len(parts) == 0 {
		b.pipelineOn(ctx, b.client.Pipeline, calls)
		return
	}
	if len(parts) == 1 {
		b.pipelineOn(ctx, parts[0].node.Pipeline, calls)
		return
	}
	// Calls of several masters (a ListLeases chunk, a lane's batch after
	// the map changed): a pipeline per master, in parallel
	// (TestMixedMasterBatchDuringSlotMove).
	var wg sync.WaitGroup
	for _, part := range parts {
		wg.Go(func() { b.pipelineOn(ctx, part.node.Pipeline, part.calls) })
	}
	wg.Wait()
}

// pipelineOn is pipelineCalls for calls in pipelines that pipeline makes.
func (b *Backend) pipelineOn(ctx context.Context, pipeline func() redis.Pipeliner, calls []*leaseCall) {
	p := pipeline()
	for _, c := range calls {
		_ = p.Process(ctx, c.cmd)
	}
	b.execPipe(ctx, p) // each command carries its own error
	var again redis.Pipeliner
	for _, c := range calls {
		if isNoScript(c.cmd.Err()) {
			if again == nil {
				again = pipeline()
			}
			b.hints.note(c.script, c.cmd.Err())
			c.cmd = c.eval(ctx)
			_ = again.Process(ctx, c.cmd)
		}
	}
	if again != nil {
		b.execPipe(ctx, again)
	}
	for _, c := range calls {
		b.hints.note(c.script, c.cmd.Err())
	}
	b.followRedirects(ctx, calls)
}

// masterCalls is the run of a batch's calls whose keys are on one master,
// with that master's own client.
type masterCalls struct {
	node  *redis.Client
	calls []*leaseCall
}

// byMaster cuts calls into runs of one master each, in order of their
// first call, on a Cluster client whose map of slots tells every call's
// master; otherwise it returns nil.
func (b *Backend) byMaster(calls []*leaseCall) []masterCalls {
	cc, ok := b.client.(*redis.ClusterClient)
	if !ok {
		return nil
	}
	var parts []masterCalls
	index := map[string]int{} // master's address → its run in parts
	for _, c := range calls {
		node, err := cc.MasterForKey(noWait, c.key)
		if err != nil {
			return nil
		}
		addr := node.Options().Addr
		i, seen := index[addr]
		if !seen {
			i = len(parts)
			index[addr] = i
			parts = append(parts, masterCalls{node: node})
		}
		parts[i].calls = append(parts[i].calls, c)
	}
	return parts
}

// followRedirects sends again, one at a time through the client (which
// follows MOVED and ASK), each of calls a master's own pipeline had answered
// MOVED or ASK: those did not run.
func (b *Backend) followRedirects(ctx context.Context, calls []*leaseCall) {
	if _, ok := b.client.(*redis.ClusterClient); !ok {
		return
	}
	for _, c := range calls {
		if err := c.cmd.Err(); redis.HasErrorPrefix(err, "MOVED ") || redis.HasErrorPrefix(err, "ASK ") {
			// (execPipe already asked for a reload of the map on MOVED.)
			c.cmd = redis.NewCmd(ctx, slices.Clone(c.cmd.Args())...)
			b.sendCall(ctx, c)
		}
	}
}

// runPipelined sends calls in pipelines of up to PipelineChunk scripts
// (see inPipelines) and returns the first error of any command other than
// redis.Nil.
func (b *Backend) runPipelined(ctx context.Context, calls []*leaseCall) error {
	if len(calls) == 0 {
		return nil
	}
	cold := !b.hints.cached(calls[0].script)
	inPipelines(len(calls), func(int) int { return 1 }, cold, func(lo, hi int) {
		b.sendCalls(ctx, calls[lo:hi])
	})
	for _, c := range calls {
		if err := c.cmd.Err(); err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
	}
	return nil
}

// sendCalls sends calls in one pipeline, or alone when there is one.
func (b *Backend) sendCalls(ctx context.Context, calls []*leaseCall) {
	if len(calls) == 1 {
		b.sendCall(ctx, calls[0])
	} else {
		b.pipelineCalls(ctx, calls)
	}
}

// inPipelines cuts n scripts into consecutive runs [lo, hi) of at most
// PipelineChunk in total size (a script larger than that is a run of its
// own) and calls send for each run from its own goroutine, at most
// renewInFlight at once, so that the server works through one pipeline
// while the next is built and written. With cold (the script may not be
// cached on the server) the first run is sent alone first. It returns when
// every send has.
func inPipelines(n int, size func(i int) int, cold bool, send func(lo, hi int)) {
	var g errgroup.Group
	g.SetLimit(renewInFlight)
	for start := 0; start < n; {
		lo, hi, total := start, start+1, size(start)
		for hi < n && total+size(hi) <= PipelineChunk {
			total += size(hi)
			hi++
		}
		if cold && lo == 0 {
			send(lo, hi)
			start = hi
			continue
		}
		g.Go(func() error {
			send(lo, hi)
			return nil
		})
		start = hi
	}
	_ = g.Wait()
}

// renewInFlight bounds the pipelines runPipelined has in flight at once.
const renewInFlight = 3

func isNoScript(err error) bool {
	return err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT"))
}

// AcquireLease takes key for owner for ttl, as lease.Provider says, in one Lua
// script. A free or expired key starts a new tenure whose token comes from the
// key's fencing counter; a key owner already holds gets its TTL reset to ttl
// and keeps its token; a key held by another owner is left alone and the
// result names that holder, its token and the time left (Acquired false, nil
// error; build a *lease.HeldError with lease.NewHeldError when you need one).
// A refresh by a holder whose tenure was revoked returns a
// *lease.RevokedError (see RevokeLease). Bad input returns an error wrapping lease.ErrInvalid; after Close,
// lease.ErrClosed; a Redis failure, the wrapped Redis error.
func (b *Backend) AcquireLease(ctx context.Context, key, owner string, ttl time.Duration) (lease.Result, error) {
	if err := lease.CheckAcquire(key, owner, ttl); err != nil {
		return lease.Result{}, err
	}
	if b.isClosed() {
		return lease.Result{}, lease.ErrClosed
	}
	c := newCall(ctx, acquireScript,
		[]string{b.keys.Lease(key), b.keys.Fence(key), b.keys.LeaseState(key), b.keys.LeaseRevoked(key)},
		owner, ttlMillis(ttl), b.statusWindowMillis(), b.fenceIdleMillis())
	var reply any
	var err error
	if b.opts.leaseSync() {
		reply, err = b.runSyncedMigrating(ctx, c, b.keys.Lease(key), "won", func(r any) bool { _, won := r.(int64); return won })
	} else {
		reply, err = b.runLeaseMigrating(ctx, c).Result()
	}
	if err != nil {
		return lease.Result{}, b.leaseErr("acquire", key, err)
	}
	if reason, ok := revokedReply(reply); ok {
		return lease.Result{}, &lease.RevokedError{Key: key, Owner: owner, Reason: reason}
	}
	r, err := parseAcquire(reply, owner, ttl)
	if err != nil {
		return lease.Result{}, b.leaseErr("acquire", key, err)
	}
	return r, nil
}

// parseAcquire reads the reply of acquire.lua: the token when owner holds
// the lease for ttl, else {holder, token, pttl}.
func parseAcquire(reply any, owner string, ttl time.Duration) (lease.Result, error) {
	switch v := reply.(type) {
	case int64:
		return lease.Result{Acquired: true, Owner: owner, Token: uint64(v), TTL: ttl.Truncate(time.Millisecond)}, nil
	case []any:
		if len(v) == 3 {
			holder, ok1 := v[0].(string)
			tok, ok2 := v[1].(int64)
			ms, ok3 := v[2].(int64)
			if ok1 && ok2 && ok3 {
				return lease.Result{Owner: holder, Token: uint64(tok), TTL: pttl(ms)}, nil
			}
		}
	}
	return lease.Result{}, fmt.Errorf("unexpected reply %v", reply)
}

// GetLeaseOwner returns the holder of the live lease on key, or "" when there
// is none. Bad input returns an error wrapping lease.ErrInvalid; after Close,
// lease.ErrClosed.
func (b *Backend) GetLeaseOwner(ctx context.Context, key string) (string, error) {
	if err := lease.CheckKey(key); err != nil {
		return "", err
	}
	if b.isClosed() {
		return "", lease.ErrClosed
	}
	owner, err := b.runLeaseMigrating(ctx, newCall(ctx, ownerScript, []string{b.keys.Lease(key)})).Text()
	switch {
	case errors.Is(err, redis.Nil):
		return "", nil
	case err != nil:
		return "", b.leaseErr("get owner of", key, err)
	}
	return owner, nil
}

// ReleaseLease deletes the lease on key when owner holds it, and otherwise
// does nothing and returns nil; the check and the delete are one script. The
// fencing counter is kept, so the next tenure gets a higher token. Bad input
// returns an error wrapping lease.ErrInvalid; after Close, lease.ErrClosed.
func (b *Backend) ReleaseLease(ctx context.Context, key, owner string) error {
	if err := lease.CheckRelease(key, owner); err != nil {
		return err
	}
	return b.release(ctx, key, owner, "")
}

// ReleaseLeaseToken is ReleaseLease that deletes the lease only when owner
// holds it in the tenure of token (lease.TokenReleaser): a release that the
// network delivers late leaves a later tenure of the same owner alone
// (TestReviewH70LateReleaseEndsLaterTenure). A token of 0 is bad input.
func (b *Backend) ReleaseLeaseToken(ctx context.Context, key, owner string, token uint64) error {
	if err := lease.CheckRelease(key, owner); err != nil {
		return err
	}
	if token == 0 {
		return fmt.Errorf("%w: token is 0 (key %q)", lease.ErrInvalid, key)
	}
	return b.release(ctx, key, owner, strconv.FormatUint(token, 10))
}

// release runs release.lua; token is "" to release whatever tenure owner
// holds.
func (b *Backend) release(ctx context.Context, key, owner, token string) error {
	if b.isClosed() {
		return lease.ErrClosed
	}
	if err := b.runLeaseMigrating(ctx, newCall(ctx, releaseScript,
		[]string{b.keys.Lease(key), b.keys.LeaseState(key), b.keys.Fence(key)}, owner, b.statusWindowMillis(), token)).Err(); err != nil {
		return b.leaseErr("release", key, err)
	}
	return nil
}

// RenewLease resets the TTL of owner's live lease on key to ttl and reports
// true; it reports false when owner does not hold a live lease (an expired
// lease is never re-created), and a *lease.RevokedError when owner's tenure
// was revoked (see RevokeLease). Bad input returns an error wrapping
// lease.ErrInvalid; after Close, lease.ErrClosed.
func (b *Backend) RenewLease(ctx context.Context, key, owner string, ttl time.Duration) (bool, error) {
	if err := lease.CheckAcquire(key, owner, ttl); err != nil {
		return false, err
	}
	if b.isClosed() {
		return false, lease.ErrClosed
	}
	c := newCall(ctx, renewScript,
		[]string{b.keys.Lease(key), b.keys.LeaseRevoked(key), b.keys.LeaseState(key), b.keys.Fence(key)},
		owner, ttlMillis(ttl), b.fenceIdleMillis())
	var reply any
	var err error
	if b.opts.leaseSync() {
		reply, err = b.runSyncedMigrating(ctx, c, b.keys.Lease(key), "renewed", func(r any) bool { n, _ := r.(int64); return n == 1 })
	} else {
		reply, err = b.runLeaseMigrating(ctx, c).Result()
	}
	if err != nil {
		return false, b.leaseErr("renew", key, err)
	}
	if reason, ok := revokedReply(reply); ok {
		return false, &lease.RevokedError{Key: key, Owner: owner, Reason: reason}
	}
	n, ok := reply.(int64)
	if !ok {
		return false, b.leaseErr("renew", key, fmt.Errorf("unexpected reply %v", reply))
	}
	return n == 1, nil
}

// TransferLease hands key from fromOwner to toOwner in one script: the lease
// value is overwritten (never deleted) with toOwner, a new token from the
// fencing counter and a full ttl, and it reports true. It reports false when
// fromOwner does not hold a live lease, and a *lease.RevokedError when
// fromOwner's tenure was revoked. Bad input (including fromOwner ==
// toOwner) returns an error wrapping lease.ErrInvalid; after Close,
// lease.ErrClosed.
func (b *Backend) TransferLease(ctx context.Context, key, fromOwner, toOwner string, ttl time.Duration) (bool, error) {
	tok, err := b.TransferLeaseToken(ctx, key, fromOwner, toOwner, ttl)
	return tok > 0, err
}

// TransferLeaseToken is TransferLease that also returns toOwner's fencing
// token (0 when refused): lease.TokenTransferer, so that lease.Held.Transfer
// needs no second script to read it.
func (b *Backend) TransferLeaseToken(ctx context.Context, key, fromOwner, toOwner string, ttl time.Duration) (uint64, error) {
	if err := lease.CheckTransfer(key, fromOwner, toOwner, ttl); err != nil {
		return 0, err
	}
	if b.isClosed() {
		return 0, lease.ErrClosed
	}
	// The nonce tells a go-redis retry of this call (which ran: it reports
	// the transfer done) from another call (refused): see transfer.lua.
	c := newCall(ctx, transferScript,
		[]string{b.keys.Lease(key), b.keys.Fence(key), b.keys.LeaseState(key), b.keys.LeaseRevoked(key)},
		fromOwner, toOwner, ttlMillis(ttl), b.statusWindowMillis(), b.fenceIdleMillis(), strconv.FormatUint(rand.Uint64(), 36))
	var reply any
	var err error
	if b.opts.leaseSync() {
		reply, err = b.runSyncedMigrating(ctx, c, b.keys.Lease(key), "won", func(r any) bool { n, _ := r.(int64); return n > 0 })
	} else {
		reply, err = b.runLeaseMigrating(ctx, c).Result()
	}
	if err != nil {
		return 0, b.leaseErr("transfer", key, err)
	}
	if reason, ok := revokedReply(reply); ok {
		return 0, &lease.RevokedError{Key: key, Owner: fromOwner, Reason: reason}
	}
	tok, ok := reply.(int64)
	if !ok || tok < 0 {
		return 0, b.leaseErr("transfer", key, fmt.Errorf("unexpected reply %v", reply))
	}
	return uint64(tok), nil
}

// leaseErr wraps a Redis error of a lease operation on key. A client closed
// by Close (NewURL's own client) reads as lease.ErrClosed.
func (b *Backend) leaseErr(op, key string, err error) error {
	return b.batchErr(fmt.Sprintf("%s lease %q", op, key), err)
}

// batchErr wraps a Redis error of a lease operation described by what, as
// leaseErr does.
func (b *Backend) batchErr(what string, err error) error {
	if errors.Is(err, redis.ErrClosed) && b.isClosed() {
		err = lease.ErrClosed
	}
	return fmt.Errorf("redisstreams: %s: %w", what, err)
}

// fenceIdleMillis is Options.FenceIdle in milliseconds, as the scripts take
// it.
func (b *Backend) fenceIdleMillis() int64 { return b.opts.FenceIdle.Milliseconds() }

// ttlMillis converts ttl (at least 1ms, as lease.CheckTTL ensures) to whole
// milliseconds, rounding down so a lease never outlives what was asked.
func ttlMillis(ttl time.Duration) int64 { return int64(ttl / time.Millisecond) }

// pttl converts a PTTL reply to a duration; the negative replies (no expiry,
// no key) read as 0.
func pttl(ms int64) time.Duration {
	if ms < 0 {
		return 0
	}
	return time.Duration(ms) * time.Millisecond
}
