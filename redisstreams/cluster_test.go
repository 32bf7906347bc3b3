package redisstreams

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/keys"
	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/lease"
)

// TestClusterLease checks on a private 3-master Redis Cluster that the keys
// of one lease share a slot for any name, and counts the round trips of a
// large batch renewal per node (TestLeaseConformance runs the lease checks
// on a Cluster too).
func TestClusterLease(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	c := cl.Client(t)
	t.Run("KeySlots", func(t *testing.T) { testClusterLeaseKeySlots(t, c) })
	t.Run("Renew10kRoundTrips", func(t *testing.T) { testClusterLeaseRenew10k(t, cl) })
}

// testClusterLeaseKeySlots asks the cluster (CLUSTER KEYSLOT) for the slot
// of each lease key and its fencing counter, for names full of braces,
// colons, NUL and attempts to forge another key: both keys share a slot, the
// client-side slot agrees, the scripts that touch both run (no CROSSSLOT),
// and every key the cluster ends up holding sits under the prefix and
// decodes back to its name.
func testClusterLeaseKeySlots(t *testing.T, c *redis.ClusterClient) {
	b := newBackendOn(t, c)
	ctx := t.Context()
	names := append(oddNames(), "{lease}", "x}{y", "}{}{", strings.Repeat("{", 100), "a\x00}{\x00b")
	seen := map[string]string{}
	for _, n := range names {
		lk, fk := b.keys.Lease(n), b.keys.Fence(n)
		ls, err := c.ClusterKeySlot(ctx, lk).Result()
		if err != nil {
			t.Fatalf("CLUSTER KEYSLOT %q: %v", lk, err)
		}
		fs, err := c.ClusterKeySlot(ctx, fk).Result()
		if err != nil {
			t.Fatalf("CLUSTER KEYSLOT %q: %v", fk, err)
		}
		if ls != fs {
			t.Errorf("name %q: lease key %q in slot %d, fence key %q in slot %d", n, lk, ls, fk, fs)
		}
		if want := int64(keys.Slot(lk)); ls != want {
			t.Errorf("name %q: server slot %d, keys.Slot %d", n, ls, want)
		}
		if other, dup := seen[lk]; dup {
			t.Errorf("names %q and %q share the lease key %q", other, n, lk)
		}
		seen[lk] = n
		if got, ok := b.keys.ParseLease(lk); !ok || got != n {
			t.Errorf("ParseLease(%q) = %q, %v; want %q", lk, got, ok, n)
		}
		if r := mustAcquire(t, b, n, "a", time.Minute); !r.Acquired || r.Owner != "a" {
			t.Fatalf("acquire %q = %+v, want a first tenure", n, r)
		}
		if !mustTransfer(t, b, n, "a", "b", time.Minute) {
			t.Fatalf("transfer of %q = false", n)
		}
	}
	var (
		mu  sync.Mutex
		all []string
	)
	err := c.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		it := node.Scan(ctx, 0, "*", 1000).Iterator()
		for it.Next(ctx) {
			mu.Lock()
			all = append(all, it.Val())
			mu.Unlock()
		}
		return it.Err()
	})
	if err != nil {
		t.Fatalf("SCAN: %v", err)
	}
	prefix := b.keys.Prefix() + ":"
	var mine int
	for _, k := range all {
		if !strings.HasPrefix(k, prefix) {
			continue // another test's prefix
		}
		mine++
		rest := k[len(prefix):]
		if !strings.HasPrefix(rest, "lease:{") && !strings.HasPrefix(rest, "fence:{") && !strings.HasPrefix(rest, "lstate:{") && !strings.HasPrefix(rest, "revoked:{") || !strings.HasSuffix(rest, "}") {
			t.Errorf("key %q is not a lease, fence or lease state key of the prefix", k)
			continue
		}
		if strings.Count(rest, "{") != 1 || strings.Count(rest, "}") != 1 {
			t.Errorf("key %q holds more than one brace pair: a name changed its hash tag", k)
		}
	}
	if mine != 3*len(names) {
		t.Errorf("the cluster holds %d keys of the prefix, want %d (a lease, a fence and a lease state key per name)", mine, 3*len(names))
	}
	infos := mustList(t, b, "")
	if got, want := infoKeys(infos), sorted(names); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("ListLeases(\"\") = %q, want %q", got, want)
	}
}

// testClusterLeaseRenew10k checks the batch path on a Cluster: 10,000
// renewals are planned as at most 10 pipelines per master, each pipeline
// holding only scripts of keys that master serves (so the masters are
// served in parallel and independently). That plan is what is promised and
// it is deterministic; the round trips counted on the wire are logged, not
// judged, since go-redis adds retries when a loaded machine makes a node
// answer late.
func testClusterLeaseRenew10k(t *testing.T, cl *redistest.Cluster) {
	c := cl.Client(t)
	var mu sync.Mutex
	perNode := map[string]*redistest.RoundTrips{}
	c.OnNewNode(func(node *redis.Client) {
		h := &redistest.RoundTrips{}
		node.AddHook(h)
		mu.Lock()
		perNode[node.Options().Addr] = h
		mu.Unlock()
	})
	b := newBackendOn(t, c)
	reqs := acquireMany(t, b, 10_000)
	if _, err := b.RenewLeases(t.Context(), reqs); err != nil { // caches the script on every node
		t.Fatal(err)
	}
	mu.Lock()
	for _, h := range perNode {
		h.Reset()
	}
	mu.Unlock()
	ok, err := b.RenewLeases(t.Context(), reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range ok {
		if !v {
			t.Fatalf("renewal %d = false", i)
		}
	}
	r := &renewal{b: b, reqs: reqs}
	r.plan(t.Context())
	perShard := map[int]int{}
	for _, rn := range r.runs {
		perShard[rn.shard]++
		var addr string
		for _, g := range r.groups[rn.lo:rn.hi] {
			for _, q := range g {
				node, err := c.MasterForKey(t.Context(), b.keys.Lease(reqs[q].Key))
				if err != nil {
					t.Fatal(err)
				}
				if addr == "" {
					addr = node.Options().Addr
				} else if a := node.Options().Addr; a != addr {
					t.Fatalf("one pipeline holds keys of masters %s and %s", addr, a)
				}
			}
		}
	}
	if len(perShard) != 3 {
		t.Fatalf("pipelines planned for %d masters, want 3", len(perShard))
	}
	for shard, n := range perShard {
		if n > 10 {
			t.Errorf("master %d: %d pipelines planned for 10,000 renewals, want <= 10", shard, n)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for addr, h := range perNode {
		t.Logf("node %s: %d round trips on the wire", addr, h.N())
	}
}

// TestClusterLeasePausedMaster holds leases on every master of a 3-master
// Cluster in one Keeper, with a Cluster client of go-redis's default
// options, and pauses one master (SIGSTOP: its connections stay open and
// nothing answers). The leases the other masters serve must stay held, for
// several TTLs; those of the paused master are lost, as fail-closed asks.
func TestClusterLeasePausedMaster(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	t.Cleanup(func() { c.Close() })
	b := newBackendOn(t, c)
	ctx := t.Context()
	const ttl = time.Second
	k := lease.NewKeeper(b, lease.KeeperOptions{})
	t.Cleanup(func() { k.Close() })
	byNode := map[string][]*lease.Held{}
	for i := range 300 {
		key := fmt.Sprint("paused-", i)
		h, err := k.Keep(ctx, key, "a", ttl)
		if err != nil {
			t.Fatal(err)
		}
		node, err := c.MasterForKey(ctx, b.keys.Lease(key))
		if err != nil {
			t.Fatal(err)
		}
		byNode[node.Options().Addr] = append(byNode[node.Options().Addr], h)
	}
	if len(byNode) != 3 {
		t.Fatalf("leases on %d masters, want 3", len(byNode))
	}
	paused := cl.Nodes()[0]
	if len(byNode[paused.Addr()]) == 0 {
		t.Fatalf("no lease on the master %s to pause", paused.Addr())
	}
	paused.Pause(t)
	t.Cleanup(func() { paused.Resume(t) })
	time.Sleep(4 * ttl)
	for addr, hs := range byNode {
		for _, h := range hs {
			err := h.Err()
			switch {
			case addr == paused.Addr() && err == nil:
				t.Fatalf("Held %s on the paused master %s live after 4 TTL", h.Key(), addr)
			case addr != paused.Addr() && err != nil:
				t.Fatalf("Held %s on the healthy master %s lost while another master is paused: %v", h.Key(), addr, err)
			}
		}
	}
	t.Logf("%d leases on the paused master lost, %d on the two others held for 4 TTL", len(byNode[paused.Addr()]), 300-len(byNode[paused.Addr()]))
}
