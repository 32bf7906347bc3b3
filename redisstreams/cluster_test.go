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
)

// TestClusterLease runs the lease checks on a private 3-master Redis
// Cluster, checks that the keys of one lease share a slot for any name, and
// counts the round trips of a large batch renewal per node.
func TestClusterLease(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	c := cl.Client(t)
	leaseEnv{new: func(t *testing.T) *Backend { return newBackendOn(t, c) }, ttl: 200 * time.Millisecond}.run(t)
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
		if r := mustAcquire(t, b, n, "a", time.Minute); !r.Acquired || r.Token != 1 {
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

// testClusterLeaseRenew10k checks the batch path on a Cluster: pipelines are
// split per node and the nodes are served in parallel, so once the script is
// cached on the nodes (after the first batch) 10,000 renewals take at most 10
// round trips per node.
func testClusterLeaseRenew10k(t *testing.T, cl *redistest.Cluster) {
	c := cl.Client(t)
	var mu sync.Mutex
	perNode := map[string]*roundTrips{}
	c.OnNewNode(func(node *redis.Client) {
		h := &roundTrips{}
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
		h.n.Store(0)
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
	mu.Lock()
	defer mu.Unlock()
	if len(perNode) != 3 {
		t.Fatalf("round trips counted on %d nodes, want 3", len(perNode))
	}
	for addr, h := range perNode {
		if n := h.n.Load(); n > 10 {
			t.Errorf("node %s: %d round trips for 10,000 renewals, want <= 10", addr, n)
		} else {
			t.Logf("node %s: %d round trips", addr, n)
		}
	}
}
