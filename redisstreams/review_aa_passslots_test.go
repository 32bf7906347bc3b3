package redisstreams

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/keys"
)

// TestReviewAAPassSlotsForgetGoneMasters (review AA, item 2): passSlots
// keeps one set of pass slots per master address it ever saw, never drops
// one, and past maxLanes (64) addresses hands every new master the
// Backend's one shared set: exactly the single set that let a master whose
// replica stalled starve the other masters' on-demand subscriptions
// (TestOnDemandStalledMasterSparesOtherMasters). Master addresses change
// over a long-lived process's life (a failover promotes a replica, a node
// replaced or rescheduled comes back on another address): a 3-master
// Cluster whose masters all moved 21 times has used up the 64 (the 65th
// address, generation 21, gets the shared set).
// Here the client's map of slots (ClusterOptions.ClusterSlots, no server:
// passSlots sends nothing) names 3 new master addresses per generation.
// Asserted: in every generation the 3 current masters get 3 distinct sets,
// none of them the shared one.
func TestReviewAAPassSlotsForgetGoneMasters(t *testing.T) {
	var gen atomic.Int64
	// TEST-NET-1 addresses, never dialed.
	addr := func(g int64, i int) string { return fmt.Sprintf("192.0.2.1:%d", 1+3*int(g)+i) }
	c := redis.NewClusterClient(&redis.ClusterOptions{
		ClusterSlots: func(context.Context) ([]redis.ClusterSlot, error) {
			g := gen.Load()
			return []redis.ClusterSlot{
				{Start: 0, End: 5460, Nodes: []redis.ClusterNode{{Addr: addr(g, 0)}}},
				{Start: 5461, End: 10922, Nodes: []redis.ClusterNode{{Addr: addr(g, 1)}}},
				{Start: 10923, End: 16383, Nodes: []redis.ClusterNode{{Addr: addr(g, 2)}}},
			}, nil
		},
	})
	t.Cleanup(func() { c.Close() })
	b := psBackend(t, c, Options{})
	// A key on each master.
	var ks [3]string
	for i, n := 0, 0; n < 3; i++ {
		k := b.keys.Stream(fmt.Sprint("t", i))
		s := int(keys.Slot(k))
		j := 0
		if s > 10922 {
			j = 2
		} else if s > 5460 {
			j = 1
		}
		if ks[j] == "" {
			ks[j] = k
			n++
		}
	}
	for g := int64(0); g < 30; g++ {
		gen.Store(g)
		c.ReloadState(context.Background())
		deadline := time.Now().Add(5 * time.Second)
		for b.masterOf(ks[0]) != addr(g, 0) {
			if time.Now().After(deadline) {
				t.Fatalf("generation %d: the map was not reloaded (master of %s: %q)", g, ks[0], b.masterOf(ks[0]))
			}
			time.Sleep(5 * time.Millisecond)
			c.ReloadState(context.Background())
		}
		seen := map[chan struct{}]string{}
		for i, k := range ks {
			m := b.masterOf(k)
			if m != addr(g, i) {
				t.Fatalf("generation %d: master of %s is %q, want %q", g, k, m, addr(g, i))
			}
			s := b.bus.passSlots(k)
			if s == b.bus.passes {
				t.Fatalf("generation %d (%d master addresses seen): master %s gets the Backend's shared pass slots: a stalled master among such masters starves the others again", g, 3*(g+1), m)
			}
			if o, ok := seen[s]; ok {
				t.Fatalf("generation %d: masters %s and %s share pass slots", g, o, m)
			}
			seen[s] = m
		}
	}
}
