package redisstreams

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/keys"
	"github.com/leasebus/leasebus/internal/redistest"
)

// TestMixedMasterBatchDuringSlotMove: a batch of lease scripts for several
// Cluster masters (a ListLeases chunk, or a lane's batch after the map of
// slots changed), sent while one slot migrates, with a lease of that slot
// whose keys are split (TRYAGAIN) first and one whose keys all moved (ASK)
// second. go-redis v9.23's ClusterClient pipeline then sends the second to
// two nodes at once (it maps the whole node's batch again for the first
// command's TRYAGAIN, besides queueing the second for the ASK target), and
// two goroutines write its reply: the race detector reported it. The batch
// is now cut per master, each part sent on its master's own pipeline, and
// the redirected call followed alone: each call gets its own answer (the
// moved lease read on the target, the other master's lease read, the split
// one refused).
func TestMixedMasterBatchDuringSlotMove(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	cc := cl.Client(t)
	b := psBackend(t, cc, Options{Logger: slog.New(slog.DiscardHandler)})
	ctx := t.Context()
	base := fmt.Sprint("mx-", time.Now().UnixNano())
	split := base + "-split"
	if r, err := b.AcquireLease(ctx, split, "o-"+split, time.Minute); err != nil || !r.Acquired { // (loads the map of slots)
		t.Fatalf("AcquireLease(%s) = %+v, %v", split, r, err)
	}
	slot := keys.Slot(b.keys.Lease(split))
	master := b.masterOf(b.keys.Lease(split))
	if master == "" {
		t.Fatal("the client's map of slots cannot tell the master")
	}
	moved, other := "", ""
	for i := 0; (moved == "" || other == "") && i < 1_000_000; i++ {
		n := fmt.Sprint(base, "-", i)
		switch {
		case moved == "" && keys.Slot(b.keys.Lease(n)) == slot:
			moved = n
		case other == "" && b.masterOf(b.keys.Lease(n)) != master:
			other = n
		}
	}
	if moved == "" || other == "" {
		t.Fatal("found no names for the test")
	}
	for _, n := range []string{moved, other} {
		if r, err := b.AcquireLease(ctx, n, "o-"+n, time.Minute); err != nil || !r.Acquired {
			t.Fatalf("AcquireLease(%s) = %+v, %v", n, r, err)
		}
	}
	m := cl.StartSlotMove(t, b.keys.Lease(split))
	defer func() {
		for m.MigrateRest() > 0 {
		}
		m.Finish()
	}()
	m.Migrate(b.keys.Lease(moved), b.keys.Fence(moved)) // all of moved's: ASK
	m.Migrate(b.keys.Lease(split))                      // half of split's: TRYAGAIN

	for round := range 20 {
		calls := []*leaseCall{b.inspectCall(ctx, split), b.inspectCall(ctx, moved), b.inspectCall(ctx, other)}
		b.pipelineCalls(context.Background(), calls)
		for i, n := range []string{moved, other} {
			info, ok, err := parseInspect(n, calls[i+1].cmd)
			if err != nil || !ok || info.Owner != "o-"+n {
				t.Fatalf("round %d: inspect of %s in a mixed batch = %+v, %v, %v; want its owner o-%s", round, n, info, ok, err, n)
			}
		}
		if err := calls[0].cmd.Err(); err == nil {
			t.Fatalf("round %d: inspect of %s, its keys split by the move, succeeded: the test's premise failed", round, split)
		}
	}
}
