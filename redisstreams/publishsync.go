package redisstreams

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"

	"github.com/redis/go-redis/v9"
)

// syncPart is the share of a batch that goes to one master with
// Options.PublishSyncReplicas: its requests in pipeline order, the
// connection to send them on, and, once sent, their replies and WAIT's.
type syncPart struct {
	conn  redis.Cmdable // the *redis.Client of the master
	addr  string
	reqs  []*pubReq
	cmds  []interface{ Result() (string, error) }
	trims map[string]*redis.Cmd
	wait  *redis.IntCmd
}

// syncedPipeline is pipeline (batch already flattened) with
// Options.PublishSyncReplicas: the batch's commands go out as pipeline
// queues them, followed by WAIT PublishSyncReplicas PublishSyncTimeout in
// the same pipeline, so on the connection that carried the writes and in
// the same round trip. On a *redis.Client the batch is one pipeline. On a
// *redis.ClusterClient the batch is split by master (MasterForKey, as
// runSyncedNow does for leases: a batch's lane may be "" and span masters
// when the client had no map of slots when it was formed), each part a
// pipeline on that master's own client, so that its WAIT follows its own
// writes; a MOVED reply is not followed there, the request fails with it,
// and an ASK reply is followed by execSynced. The parts go out concurrently, as go-redis sends a Cluster
// pipeline's per-node parts: each may wait for its replicas up to
// PublishSyncTimeout, and one after the other those waits would add up.
// A request whose write succeeded but whose master's WAIT failed or
// counted fewer replicas than asked gets an error wrapping
// ErrNotReplicated; one whose write failed keeps its own error.
func (s *streamBus) syncedPipeline(ctx context.Context, batch []*pubReq) {
	parts := s.syncParts(ctx, batch)
	seq := s.deletions()
	send := func(p *syncPart) {
		pipe := p.conn.Pipeline()
		p.cmds, p.trims = s.queue(ctx, pipe, p.reqs)
		p.wait = redis.NewIntCmd(ctx, "wait", s.b.opts.PublishSyncReplicas, s.b.opts.PublishSyncTimeout.Milliseconds())
		_ = pipe.Process(ctx, p.wait)
		p.addr = s.b.execSynced(ctx, pipe, p.addr, p.wait)
	}
	if len(parts) == 1 {
		send(parts[0])
	} else {
		var wg sync.WaitGroup
		for _, p := range parts {
			wg.Go(func() { send(p) })
		}
		wg.Wait()
	}
	for _, p := range parts {
		notSynced := s.notReplicated(p)
		for i, r := range p.reqs {
			id, err := p.cmds[i].Result()
			s.answer(r, id, err, seq)
			if r.err == nil && notSynced != nil {
				r.err = fmt.Errorf("redisstreams: publish to %q: %w", r.key, notSynced)
			}
		}
	}
	for _, p := range parts {
		failed := failedKeys(p.reqs)
		for key, cmd := range p.trims {
			s.checkTrim(ctx, key, cmd, failed[key])
		}
	}
	s.failQueuedAfter(ctx, batch)
}

// notReplicated returns the error of the writes of p whose WAIT failed or
// counted fewer replicas than PublishSyncReplicas, or nil.
func (s *streamBus) notReplicated(p *syncPart) error {
	want := s.b.opts.PublishSyncReplicas
	n, err := p.wait.Result()
	switch {
	case err != nil:
		return fmt.Errorf("%w: WAIT %d on master %s failed: %w", ErrNotReplicated, want, p.addr, err)
	case n < int64(want):
		return fmt.Errorf("%w: %d of %d replicas of master %s acknowledged within %v (PublishSyncReplicas)",
			ErrNotReplicated, n, want, p.addr, s.b.opts.PublishSyncTimeout)
	}
	return nil
}

// syncParts splits batch by master, keeping its order within each master:
// one part on a *redis.Client; on a *redis.ClusterClient one per master of
// the requests' keys. A request whose master cannot be found gets that
// error and is in no part.
func (s *streamBus) syncParts(ctx context.Context, batch []*pubReq) []*syncPart {
	var parts []*syncPart
	byAddr := make(map[string]*syncPart)
	for _, r := range batch {
		conn, err := s.b.masterConn(ctx, r.key)
		if err != nil {
			r.err = fmt.Errorf("redisstreams: xadd %q: finding its master: %w", r.key, err)
			continue
		}
		addr := conn.Options().Addr
		p := byAddr[addr]
		if p == nil {
			p = &syncPart{conn: conn, addr: addr}
			byAddr[addr] = p
			parts = append(parts, p)
		}
		p.reqs = append(p.reqs, r)
	}
	return parts
}

// masterConn returns the client to send a pipeline for key on that ends
// with WAIT (the Options' sync settings): the *redis.Client itself, or on
// a *redis.ClusterClient the own client of key's master (MasterForKey, so
// the WAIT follows writes on that master's connection; MOVED is not
// followed there, ASK is by execSynced). New allows the sync options only on these two.
func (b *Backend) masterConn(ctx context.Context, key string) (*redis.Client, error) {
	if cc, ok := b.client.(*redis.ClusterClient); ok {
		return cc.MasterForKey(ctx, key)
	}
	return b.client.(*redis.Client), nil
}

// execSynced sends pipe, a pipeline of the client masterConn returned
// (whose address is addr) that ends with waits (WAIT, and WAITAOF
// for leases), and leaves each command's error on the command; then
// reloadOnFailure. MasterForKey does not follow MOVED, so without the
// reload every synced publish, read, claim, acquire and renewal for a slot
// that moved would fail until go-redis reloads the map on its own
// (TestSyncClusterFollowsSlotMove).
//
// While a slot migrates (MIGRATING on addr, IMPORTING on the target), addr
// answers ASK for each command whose key is no longer there (moved, or
// never created), and the map of slots does not change until the migration
// ends, so execSynced follows the ASKs itself (followAsk): it sends the
// commands answered ASK again, each after ASKING, followed by the same
// waits, in one pipeline on the target's connection, and leaves on each of
// waits the weaker of its two answers (the target's alone when every other
// command was answered ASK): so a call succeeds only once the replicas of
// each master that ran one of its writes acknowledged them. Only the
// commands answered ASK go again, and a command answered ASK never ran (the
// server answers ASK before running it; a script that fails half way on a
// key that left does not answer ASK but "ERR Script attempted to access a
// non local key"), so none runs twice. It returns where the waits were
// answered: addr, the target, or both, for error messages.
func (b *Backend) execSynced(ctx context.Context, pipe redis.Pipeliner, addr string, waits ...redis.Cmder) string {
	cmds, _ := pipe.Exec(ctx) // errors are read per command
	b.reloadOnFailure(ctx, cmds...)
	if cc, ok := b.client.(*redis.ClusterClient); ok {
		return b.followAsk(ctx, cc, cmds, addr, waits)
	}
	return addr
}

// followAsk is execSynced's following of ASK replies among cmds, the
// commands of a pipeline sent to addr, waits last.
func (b *Backend) followAsk(ctx context.Context, cc *redis.ClusterClient, cmds []redis.Cmder, addr string, waits []redis.Cmder) string {
	var targets []string
	asked := map[string][]redis.Cmder{}
	ranHere, noRetry := false, false
	for _, c := range cmds {
		if slices.Contains(waits, c) {
			continue
		}
		noRetry = noRetry || c.NoRetry()
		target, ok := redis.IsAskError(c.Err())
		if !ok {
			ranHere = true // ran, or failed otherwise: addr's waits count
			continue
		}
		if asked[target] == nil {
			targets = append(targets, target)
		}
		asked[target] = append(asked[target], c)
	}
	where := ""
	if ranHere {
		where = addr
	}
	for _, target := range targets {
		conn, err := askTarget(ctx, cc, target)
		if err != nil {
			for _, c := range asked[target] {
				c.SetErr(fmt.Errorf("%w (not followed: %w)", c.Err(), err))
			}
			continue
		}
		p := conn.Pipeline()
		before := make([]error, len(asked[target]))
		for i, c := range asked[target] {
			// ASKING lets the next command only run on the importing
			// node; in MULTI it would last until EXEC, but EXEC counts
			// the keys of all its commands as one multi-key command
			// (TRYAGAIN as soon as one is missing), and WAIT does not
			// wait inside MULTI. A command go-redis never retries keeps
			// this pipeline from being retried, as it kept addr's.
			var asking redis.Cmder = redis.NewStatusCmd(ctx, "asking")
			if i == 0 && noRetry {
				asking = redis.NewRawWriteToCmd(ctx, io.Discard, "asking")
			}
			_ = p.Process(ctx, asking)
			_ = p.Process(ctx, c)
			before[i] = c.Err()
		}
		again := make([]redis.Cmder, len(waits))
		for i, w := range waits {
			again[i] = redis.NewCmd(ctx, w.Args()...)
			_ = p.Process(ctx, again[i])
		}
		sent, execErr := p.Exec(ctx)
		b.reloadOnFailure(ctx, sent...) // a MOVED: the migration ended, or was undone
		for i, c := range asked[target] {
			if execErr != nil && errors.Is(c.Err(), before[i]) {
				c.SetErr(execErr) // no reply: go-redis left the ASK error
			}
		}
		for i, w := range waits {
			mergeWait(w, again[i].(*redis.Cmd), where == "", target)
		}
		if where == "" {
			where = target
		} else {
			where += " and ASK target " + target
		}
	}
	if where == "" {
		where = addr
	}
	return where
}

// askTarget returns the client of the master at addr, an ASK's target,
// from the Cluster client's map of slots, or an error when the map has no
// such master: a node that owns no slot yet (a node added for the
// resharding, until its first slot is moved) is not in it.
func askTarget(ctx context.Context, cc *redis.ClusterClient, addr string) (*redis.Client, error) {
	var mu sync.Mutex
	var found *redis.Client
	err := cc.ForEachMaster(ctx, func(_ context.Context, c *redis.Client) error {
		if c.Options().Addr == addr {
			mu.Lock()
			found = c
			mu.Unlock()
		}
		return nil
	})
	if found == nil {
		if err == nil {
			err = fmt.Errorf("the ASK target %s is not a master in the client's map of slots (it owns no slot yet)", addr)
		}
		return nil, err
	}
	return found, nil
}

// mergeWait leaves on w, a wait (WAIT: *redis.IntCmd; WAITAOF:
// *redis.SliceCmd) answered on the source of an ASK, the weaker of its
// answer and again's, the same wait answered on the ASK's target, or
// again's alone when only is set: an error if either failed, else the
// lower count of each.
func mergeWait(w redis.Cmder, again *redis.Cmd, only bool, target string) {
	if err := again.Err(); err != nil {
		w.SetErr(fmt.Errorf("on ASK target %s: %w", target, err))
		return
	}
	if !only && w.Err() != nil {
		return // the source's failure stands
	}
	w.SetErr(nil)
	switch w := w.(type) {
	case *redis.IntCmd:
		n, err := again.Int64()
		if err != nil {
			w.SetErr(fmt.Errorf("on ASK target %s: %w", target, err))
		} else if only || n < w.Val() {
			w.SetVal(n)
		}
	case *redis.SliceCmd:
		v, err := again.Slice()
		switch {
		case err != nil:
			w.SetErr(fmt.Errorf("on ASK target %s: %w", target, err))
		case only || len(v) != len(w.Val()):
			w.SetVal(v)
		default:
			low := slices.Clone(w.Val())
			for i := range low {
				if toInt64(v[i]) < toInt64(low[i]) {
					low[i] = v[i]
				}
			}
			w.SetVal(low)
		}
	default:
		w.SetErr(fmt.Errorf("redisstreams: cannot merge %s answered on ASK target %s", w.Name(), target))
	}
}

// execPipe sends pipe, a pipeline of the Backend's client, and leaves each
// command's error on the command; then reloadOnFailure.
func (b *Backend) execPipe(ctx context.Context, pipe redis.Pipeliner) {
	cmds, _ := pipe.Exec(ctx) // errors are read per command
	b.reloadOnFailure(ctx, cmds...)
}

// reloadOnFailure asks a *redis.ClusterClient to load its map of slots
// again, in the background, when one of cmds was answered MOVED or failed
// on a transport error (except after the client was closed). After the
// Cluster promoted the replica of a master that died, nothing else would
// for up to a minute: the dead master answers nothing, so no MOVED comes,
// and go-redis sends that master's slots to it, retries included, until it
// reloads the map on its own every ClusterStateReloadInterval (60s by
// default). Every call of a Backend on a default ClusterClient for those
// slots failed for the 15s TestClusterMasterFailoverResumes waited (review
// AA saw a plain XLEN fail 38-53s after the kill); the synced calls too
// (TestReviewAASyncedClusterFollowsFailover). go-redis coalesces the
// requests: one load, then at most one more per 200ms, while calls fail.
// On any other client it does nothing.
func (b *Backend) reloadOnFailure(ctx context.Context, cmds ...redis.Cmder) {
	cc, ok := b.client.(*redis.ClusterClient)
	if !ok {
		return
	}
	for _, c := range cmds {
		if staleMapErr(c.Err()) {
			cc.ReloadState(ctx)
			return
		}
	}
}

// reloadOnErr is reloadOnFailure for a call whose error is err: the calls
// a Subscribe makes before its first read (the group's creation, the
// stream's last ID), which a Backend that made no call since a master died
// sends first (TestClusterMasterFailoverResumes: a Subscribe on such a
// Backend failed for the 15s the test waited, until go-redis's own reload).
func (b *Backend) reloadOnErr(ctx context.Context, err error) {
	if cc, ok := b.client.(*redis.ClusterClient); ok && staleMapErr(err) {
		cc.ReloadState(ctx)
	}
}

// staleMapErr reports an error after which a Cluster client's map of slots
// may be stale: a MOVED reply, or a transport error (but not the client's
// being closed).
func staleMapErr(err error) bool {
	if err == nil {
		return false
	}
	_, moved := redis.IsMovedError(err)
	return moved || (isNetErr(err) && !errors.Is(err, redis.ErrClosed))
}

// claimedCounts returns the delivery counts, as the server keeps them, of
// the entries ids pending on consumer of the group: what a claim of them
// just set, while they are still pending here. It is read after XCLAIM
// because the counts the claimer listed before may be stale: between that
// listing and the claim another member may have claimed, run and handed
// back an entry, raising its count, and a claim made with the listed count
// would run that attempt again (TestReviewH76GroupChurnUnderLoad). An id
// missing from the answer (taken since, or a failed call) is left out.
func (s *streamBus) claimedCounts(ctx context.Context, stream, group, consumer string, ids []string) map[string]int64 {
	if len(ids) == 0 {
		return nil
	}
	pipe := s.b.client.Pipeline()
	cmds := make([]*redis.XPendingExtCmd, len(ids))
	for i, id := range ids {
		cmds[i] = pipe.XPendingExt(ctx, &redis.XPendingExtArgs{
			Stream: stream, Group: group, Start: id, End: id, Count: 1, Consumer: consumer,
		})
	}
	_, _ = pipe.Exec(ctx)
	counts := make(map[string]int64, len(ids))
	for i, c := range cmds {
		if pend, err := c.Result(); err == nil && len(pend) == 1 && pend[0].ID == ids[i] {
			counts[ids[i]] = pend[0].RetryCount
		}
	}
	return counts
}

// xclaim runs XCLAIM a. With Options.PublishSyncReplicas it goes, followed
// by WAIT, in one pipeline on the master of a.Stream (on a
// *redis.ClusterClient that master's own client, not following MOVED; ASK
// is followed by execSynced), and when the WAIT failed or counted fewer replicas the entries it
// returns come with an error wrapping ErrNotReplicated: they were claimed
// on the master, but a failover could undo the claim, and with it the
// delivery count an earlier read or claim that was never acknowledged
// raised (the entry would come again as a first delivery), so the caller
// must not hand them on. A WAIT that counts the claim's write also covers
// every earlier write on that master (replication is in order), so a claim
// whose WAIT succeeds makes such a read's delivery durable too.
func (s *streamBus) xclaim(ctx context.Context, a *redis.XClaimArgs) ([]redis.XMessage, error) {
	if s.b.opts.PublishSyncReplicas <= 0 {
		return s.b.client.XClaim(ctx, a).Result()
	}
	conn, err := s.b.masterConn(ctx, a.Stream)
	if err != nil {
		return nil, fmt.Errorf("redisstreams: xclaim %q: finding its master: %w", a.Stream, err)
	}
	addr := conn.Options().Addr
	pipe := conn.Pipeline()
	claim := pipe.XClaim(ctx, a)
	wait := redis.NewIntCmd(ctx, "wait", s.b.opts.PublishSyncReplicas, s.b.opts.PublishSyncTimeout.Milliseconds())
	_ = pipe.Process(ctx, wait)
	addr = s.b.execSynced(ctx, pipe, addr, wait)
	msgs, err := claim.Result()
	if err != nil {
		return nil, err
	}
	if err := s.notReplicated(&syncPart{addr: addr, wait: wait}); err != nil {
		return msgs, fmt.Errorf("redisstreams: claim on %q: %w", a.Stream, err)
	}
	return msgs, nil
}
