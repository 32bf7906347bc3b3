package redisstreams

import (
	"context"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/backoff"
)

// While a Cluster slot migrates, Redis refuses every lease script of the
// slot: the scripts name several keys of the lease (its revoked mark among
// them, which exists only after a revoke), and a command of several keys in
// a migrating slot is answered TRYAGAIN unless all of them are on the node
// that gets it, or ASK once none is; go-redis's own few quick retries end
// long before a migration does. Refused, the script did not run on that
// try, so the lease calls send it again (runLeaseMigrating) until the
// migration ends (TestLeaseCallsRideThroughSlotMove).
//
// An earlier try inside go-redis may have run it, though: go-redis sends a
// command again after a lost reply (EOF, a read timeout), and that retry
// may be the one refused. So the scripts sent again are those that may run
// twice: acquire (the same owner refreshes its own lease), renew, transfer
// and revoke (their nonces make a second run report the first: a forced
// revoke run twice would otherwise find no lease, or revoke the next
// tenure: TestForceRevokeNotRunAgainAfterLostReplyDuringSlotMove), release
// (a second run finds nothing to release, and its reply is not read), and
// the read-only owner, state and inspect scripts.

// migratingRetry spaces the tries of a lease script refused because its
// slot migrates.
var migratingRetry = backoff.Policy{Min: 10 * time.Millisecond, Max: 200 * time.Millisecond, Jitter: true}

// migratingMaxWait bounds the tries of a call whose ctx has no deadline.
const migratingMaxWait = 5 * time.Second

// migratingErr reports a refusal of a command because its slot migrates or
// moved: the command did not run.
func migratingErr(err error) bool {
	return err != nil && (redis.HasErrorPrefix(err, "TRYAGAIN") || redis.HasErrorPrefix(err, "ASK ") ||
		redis.HasErrorPrefix(err, "MOVED "))
}

// runLeaseMigrating is runLease for a single lease script, sent again with a
// backoff (migratingRetry) while Redis refuses it because the lease's slot
// migrates, until ctx ends (on a ctx without a deadline, for at most
// migratingMaxWait); then the refusal is returned.
func (b *Backend) runLeaseMigrating(ctx context.Context, c *leaseCall) *redis.Cmd {
	cmd, _ := whileMigrating(ctx, b, c, func(ctx context.Context, c *leaseCall) (*redis.Cmd, error) {
		cmd := b.runLease(ctx, c)
		return cmd, cmd.Err()
	})
	return cmd
}

// runSyncedMigrating is runSynced, sent again as runLeaseMigrating is.
func (b *Backend) runSyncedMigrating(ctx context.Context, c *leaseCall, leaseKey, did string, won func(any) bool) (any, error) {
	return whileMigrating(ctx, b, c, func(ctx context.Context, c *leaseCall) (any, error) {
		return b.runSynced(ctx, c, leaseKey, did, won)
	})
}

// whileMigrating runs c with run, and runs a new copy of it again while the
// outcome is a refusal because its slot migrates (see runLeaseMigrating).
func whileMigrating[T any](ctx context.Context, b *Backend, c *leaseCall, run func(context.Context, *leaseCall) (T, error)) (T, error) {
	r, err := run(ctx, c)
	if !migratingErr(err) {
		return r, err
	}
	// On a ctx without a deadline the tries stop after migratingMaxWait:
	// no try starts later, and none is cut short by that limit (a try cut
	// short would report "sent and may have run" for a script the server
	// refused every time).
	var limit time.Time
	if _, ok := ctx.Deadline(); !ok {
		limit = time.Now().Add(migratingMaxWait)
	}
	bo := backoff.Backoff{Policy: migratingRetry}
	for migratingErr(err) && !b.isClosed() {
		wait := bo.Next()
		if !limit.IsZero() && time.Until(limit) < wait {
			return r, err
		}
		if backoff.Sleep(ctx, wait) != nil {
			return r, err
		}
		c = c.again(ctx)
		r, err = run(ctx, c) // any other outcome ends the tries
	}
	return r, err
}

// again returns a new call of the same script with the same keys and
// arguments, not yet sent.
func (c *leaseCall) again(ctx context.Context) *leaseCall {
	return &leaseCall{script: c.script, cmd: redis.NewCmd(ctx, slices.Clone(c.cmd.Args())...), key: c.key}
}
