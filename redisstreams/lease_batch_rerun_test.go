package redisstreams

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/keys"
	"github.com/leasebus/leasebus/internal/redistest"
)

// TestBatchedForceRevokeRunsOnceBesideMigratingCall: a lease batch for one
// master whose FIRST call is refused TRYAGAIN (its slot migrates) and whose
// second call, of another slot of the same master, runs: go-redis treats
// the first command's retryable error as the whole pipeline's
// (pipelineReadCmds returns cmds[0]'s error; both the node client's
// pipeline, used since eda57d8, and the ClusterClient's, used before,
// send the whole batch again, up to MaxRetries/MaxRedirects times). The
// forced revoke that ran on the first try runs again: it finds no live
// lease and reported 0, so its caller got lease.ErrNotHeld for a lease it
// revoked (helper 51's review; not introduced by eda57d8: the ClusterClient
// pipeline did the same). Every lease script now runs twice safely: the
// revoke's nonce (revoke.lua) makes its second run answer 1.
func TestBatchedForceRevokeRunsOnceBesideMigratingCall(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	for _, retries := range []int{0, 3} {
		t.Run(fmt.Sprint("MaxRetries=", retries), func(t *testing.T) {
			o := cl.ClientOptions()
			o.MaxRetries = retries // 0: go-redis's default (-1 on node clients)
			cc := redis.NewClusterClient(o)
			defer cc.Close()
			testBatchedForceRevoke(t, cl, cc)
		})
	}
}

func testBatchedForceRevoke(t *testing.T, cl *redistest.Cluster, cc *redis.ClusterClient) {
	b := psBackend(t, cc, Options{Logger: slog.New(slog.DiscardHandler)})
	ctx := context.Background()
	held := fmt.Sprint("held-", time.Now().UnixNano())
	if r, err := b.AcquireLease(ctx, held, "o", time.Minute); err != nil || !r.Acquired {
		t.Fatalf("AcquireLease(held) = %+v, %v", r, err)
	}
	master, slot := b.masterOf(b.keys.Lease(held)), keys.Slot(b.keys.Lease(held))
	victim := ""
	for i := 0; i < 100_000; i++ {
		n := fmt.Sprint(held, "-victim-", i)
		if b.masterOf(b.keys.Lease(n)) == master && keys.Slot(b.keys.Lease(n)) != slot {
			victim = n
			break
		}
	}
	if victim == "" {
		t.Fatal("no name on held's master in another slot")
	}
	if r, err := b.AcquireLease(ctx, victim, "v", time.Minute); err != nil || !r.Acquired {
		t.Fatalf("AcquireLease(victim) = %+v, %v", r, err)
	}
	if err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		for _, s := range []*luaScript{renewScript, revokeScript} {
			if err := c.ScriptLoad(ctx, s.src).Err(); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	m := cl.StartSlotMove(t, b.keys.Lease(held))
	defer func() {
		for m.MigrateRest() > 0 {
		}
		m.Finish()
	}()
	calls := []*leaseCall{
		// held's revoked mark does not exist: TRYAGAIN while the slot migrates.
		newCall(ctx, renewScript, []string{b.keys.Lease(held), b.keys.LeaseRevoked(held), b.keys.LeaseState(held), b.keys.Fence(held)},
			"o", ttlMillis(time.Minute), b.fenceIdleMillis()),
		newCall(ctx, revokeScript, b.revokeCallKeys(victim, "nonce-1"), "batched", "1", b.statusWindowMillis()),
	}
	b.pipelineCalls(ctx, calls)
	t.Logf("renew held: %v; force revoke victim: %v", calls[0].cmd.Err(), calls[1].cmd.Val())
	if n, err := calls[1].cmd.Int64(); err != nil || n != 1 {
		st, _ := b.LeaseState(ctx, victim)
		t.Errorf("the forced revoke of victim answered %d, %v (state now %+v); want 1: it ran, and ran again when go-redis re-sent the batch for its first call's TRYAGAIN", n, err, st)
	}
}
