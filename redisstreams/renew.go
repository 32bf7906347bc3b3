package redisstreams

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/leasebus/leasebus/internal/keys"
	"github.com/leasebus/leasebus/lease"
)

// RenewLeases renews each request as RenewLease would and returns one result
// per request, in order (lease.BatchRenewer). Requests are grouped into
// renew_many.lua calls of up to PipelineChunk leases, each checking and
// extending every lease of its group on the server's clock: on a standalone
// or Sentinel client, consecutive requests; on a Cluster, requests whose
// lease keys share a hash slot; on any other client (a Ring), one request
// per call. The calls go out in pipelines of up to PipelineChunk leases, up
// to 3 at once per server; on a Cluster each pipeline holds the calls of one
// master only and the masters are served in parallel and independently. So
// 10,000 renewals on one server are 10 scripts in 10 overlapped round trips.
// When the server has lost the script cache the affected calls are sent
// again as EVAL.
//
// RenewLeases returns when every pipeline has been answered or when ctx
// ends, whichever comes first, even with a client that ignores ctx
// deadlines (a pipeline still waiting then goes on in the background until
// the client gives up; Close and Shutdown wait for it: TestReviewH70CloseLeavesRenewalRunning).
// When some pipelines failed or were not answered in time and others were, it returns the full result with a *lease.BatchError
// naming the requests that have no known result: one unreachable Cluster
// master fails only the leases it serves. A request whose tenure was
// revoked reports false with a *lease.RevokedError entry in the
// *lease.BatchError. When none was answered, it returns only an error. A bad request fails the whole call with an error
// wrapping lease.ErrInvalid, before anything is sent; after Close,
// lease.ErrClosed.
func (b *Backend) RenewLeases(ctx context.Context, reqs []lease.Renewal) ([]bool, error) {
	if err := lease.CheckRenewals(reqs); err != nil {
		return nil, err
	}
	if b.isClosed() {
		return nil, lease.ErrClosed
	}
	if len(reqs) == 0 {
		return []bool{}, nil
	}
	r := &renewal{b: b, reqs: reqs, out: make([]bool, len(reqs)), errs: make([]error, len(reqs))}
	r.plan(ctx)
	done := make(chan struct{})
	// Counted in b.late: a send left behind when ctx ends (its pipelines
	// wait for the client to answer or give up) is waited for by Shutdown,
	// as the single-lease calls' are.
	b.late.add()
	go func() {
		defer b.late.done()
		defer close(done)
		r.send(ctx)
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
	return r.result(ctx)
}

// renewal is one RenewLeases call.
type renewal struct {
	b    *Backend
	reqs []lease.Renewal

	groups [][]int // indexes of reqs, one renew_many.lua call each
	runs   []run   // pipelines: consecutive groups of one shard

	mu       sync.Mutex
	finished bool // the caller has taken the results; late answers are dropped
	out      []bool
	errs     []error
	answered []bool // per run
}

// run is one pipeline: groups [lo, hi) of one shard.
type run struct{ shard, lo, hi int }

// plan groups the requests and cuts the groups into pipelines.
func (r *renewal) plan(ctx context.Context) {
	var shardOf []int
	r.groups, shardOf = r.b.renewGroups(ctx, r.reqs)
	for lo := 0; lo < len(r.groups); {
		hi, total := lo+1, len(r.groups[lo])
		for hi < len(r.groups) && shardOf[hi] == shardOf[lo] && total+len(r.groups[hi]) <= PipelineChunk {
			total += len(r.groups[hi])
			hi++
		}
		r.runs = append(r.runs, run{shard: shardOf[lo], lo: lo, hi: hi})
		lo = hi
	}
	r.answered = make([]bool, len(r.runs))
}

// send sends every pipeline and returns when all are answered: the shards
// in parallel, up to renewInFlight pipelines at once per shard, the first
// of each shard alone when the script may not be cached yet.
func (r *renewal) send(ctx context.Context) {
	cold := !r.b.hints.cached(renewManyScript)
	var wg sync.WaitGroup
	for first := 0; first < len(r.runs); {
		end := first + 1
		for end < len(r.runs) && r.runs[end].shard == r.runs[first].shard {
			end++
		}
		lo, hi := first, end
		wg.Go(func() { r.sendShard(ctx, lo, hi, cold) })
		first = end
	}
	wg.Wait()
}

// sendShard sends runs [first, end), all of one shard.
func (r *renewal) sendShard(ctx context.Context, first, end int, cold bool) {
	var g errgroup.Group
	g.SetLimit(renewInFlight)
	for i := first; i < end; i++ {
		if cold && i == first {
			r.sendRun(ctx, i)
			continue
		}
		g.Go(func() error { r.sendRun(ctx, i); return nil })
	}
	_ = g.Wait()
}

// sendRun sends pipeline i and records its answers, unless the caller has
// already taken the results.
func (r *renewal) sendRun(ctx context.Context, i int) {
	rn := r.runs[i]
	calls := make([]*leaseCall, rn.hi-rn.lo)
	for ci, g := range r.groups[rn.lo:rn.hi] {
		keys := make([]string, 3*len(g))
		argv := make([]any, 2*len(g)+1)
		for j, q := range g {
			keys[j] = r.b.keys.Lease(r.reqs[q].Key)
			keys[len(g)+j] = r.b.keys.LeaseRevoked(r.reqs[q].Key)
			keys[2*len(g)+j] = r.b.keys.Fence(r.reqs[q].Key)
			argv[j] = r.reqs[q].Owner
			argv[len(g)+j] = ttlMillis(r.reqs[q].TTL)
		}
		argv[2*len(g)] = r.b.fenceIdleMillis()
		calls[ci] = newCall(ctx, renewManyScript, keys, argv...)
	}
	// With LeaseSyncReplicas or LeaseSyncAOF, a renewal counts only once
	// the replicas (the AOF) have it: otherwise a failover could promote a
	// replica where the lease ends before the deadline its holder was told.
	var unsynced error
	if r.b.opts.leaseSync() {
		wait, waitAOF, err := r.b.sendSynced(ctx, calls, r.b.keys.Lease(r.reqs[r.groups[rn.lo][0]].Key))
		if err == nil {
			err = r.b.syncErr(wait, waitAOF, "renewed")
		}
		unsynced = err
	} else {
		r.b.sendCalls(ctx, calls)
	}
	out := make(map[int]bool)
	errs := make(map[int]error)
	for ci, c := range calls {
		g := r.groups[rn.lo+ci]
		res, err := c.cmd.Text()
		if err == nil && len(res) != len(g) {
			err = fmt.Errorf("unexpected reply %q to a renewal of %d leases", res, len(g))
		}
		for j, q := range g {
			switch {
			case err != nil:
				errs[q] = err
			case res[j] == '1' && unsynced != nil:
				errs[q] = unsynced
			case res[j] == '1' || res[j] == '0':
				out[q] = res[j] == '1'
			case res[j] == 'r':
				// Revoked: the error carries the reason, read here so
				// that the caller's wait for ctx covers it.
				var reason string
				if st, serr := r.b.LeaseState(ctx, r.reqs[q].Key); serr == nil {
					reason = st.Reason
				}
				errs[q] = &lease.RevokedError{Key: r.reqs[q].Key, Owner: r.reqs[q].Owner, Reason: reason}
			default:
				errs[q] = fmt.Errorf("unexpected reply byte %q for lease %q", res[j], r.reqs[q].Key)
			}
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.finished {
		return
	}
	r.answered[i] = true
	for q, ok := range out {
		r.out[q] = ok
	}
	for q, err := range errs {
		r.errs[q] = err
	}
}

// result takes the results: requests of pipelines not answered yet fail
// with ctx's error.
func (r *renewal) result(ctx context.Context) ([]bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.finished = true
	for i, rn := range r.runs {
		if r.answered[i] {
			continue
		}
		err := fmt.Errorf("no answer before the call's ctx ended: %w", context.Cause(ctx))
		for _, g := range r.groups[rn.lo:rn.hi] {
			for _, q := range g {
				r.errs[q] = err
			}
		}
	}
	// Only when no request got an answer (a revoke is an answer) is the
	// whole call an error; otherwise each failure is named.
	failed, answered := 0, 0
	var first error
	for _, err := range r.errs {
		switch {
		case err == nil:
			answered++
		case errors.Is(err, lease.ErrRevoked):
			failed++
			answered++
		default:
			failed++
			first = cmp.Or(first, err)
		}
	}
	switch {
	case failed == 0:
		return r.out, nil
	case answered == 0:
		return nil, r.b.batchErr(fmt.Sprintf("renew %d leases", len(r.reqs)), first)
	}
	errs := make([]error, len(r.errs))
	for i, err := range r.errs {
		switch {
		case errors.Is(err, lease.ErrRevoked):
			errs[i] = err
		case err != nil:
			errs[i] = r.b.batchErr(fmt.Sprintf("renew lease %q", r.reqs[i].Key), err)
		}
	}
	return r.out, &lease.BatchError{Errs: errs}
}

// renewGroups splits the indexes of reqs into the groups RenewLeases sends
// to renew_many.lua, each of at most PipelineChunk requests whose keys one
// call may touch, and returns with each group the shard (server) it goes to,
// the groups ordered by shard.
func (b *Backend) renewGroups(ctx context.Context, reqs []lease.Renewal) (groups [][]int, shardOf []int) {
	switch c := b.client.(type) {
	case *redis.Client:
		// One server: any keys may share a script.
		idx := make([]int, len(reqs))
		for i := range idx {
			idx[i] = i
		}
		groups = slices.Collect(slices.Chunk(idx, PipelineChunk))
		return groups, make([]int, len(groups))
	case *redis.ClusterClient:
		// One script may touch only keys of one hash slot; one pipeline
		// only keys of one master.
		bySlot := make(map[uint16]int) // slot → index in groups of its open group
		var slotOf []uint16
		for i, r := range reqs {
			key := b.keys.Lease(r.Key)
			slot := keys.Slot(key)
			gi, ok := bySlot[slot]
			if !ok || len(groups[gi]) == PipelineChunk {
				gi = len(groups)
				groups = append(groups, nil)
				slotOf = append(slotOf, slot)
				bySlot[slot] = gi
			}
			groups[gi] = append(groups[gi], i)
		}
		shards := map[string]int{}
		shardOf = make([]int, len(groups))
		for gi, g := range groups {
			addr := fmt.Sprint("slot ", slotOf[gi]) // the cluster state is unknown: a shard per slot
			if node, err := c.MasterForKey(ctx, b.keys.Lease(reqs[g[0]].Key)); err == nil {
				addr = node.Options().Addr
			}
			s, ok := shards[addr]
			if !ok {
				s = len(shards)
				shards[addr] = s
			}
			shardOf[gi] = s
		}
		order := make([]int, len(groups))
		for i := range order {
			order[i] = i
		}
		slices.SortStableFunc(order, func(x, y int) int { return cmp.Compare(shardOf[x], shardOf[y]) })
		sorted, sortedShard := make([][]int, len(groups)), make([]int, len(groups))
		for i, gi := range order {
			sorted[i], sortedShard[i] = groups[gi], shardOf[gi]
		}
		return sorted, sortedShard
	default:
		// A Ring (or another sharding client) may put any two keys on
		// different shards: a script per request, in the client's own
		// pipelines (which split them per shard).
		groups = make([][]int, len(reqs))
		for i := range reqs {
			groups[i] = []int{i}
		}
		return groups, make([]int, len(reqs))
	}
}
