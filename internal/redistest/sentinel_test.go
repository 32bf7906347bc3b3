package redistest

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestStartSentinel(t *testing.T) {
	s := StartSentinel(t, 1)
	if s.MasterName() != "lbmaster" {
		t.Fatalf("MasterName() = %q, want lbmaster", s.MasterName())
	}
	addrs := s.SentinelAddrs()
	if len(addrs) != 1 || !strings.HasPrefix(addrs[0], "127.0.0.1:") {
		t.Fatalf("SentinelAddrs() = %v, want one private 127.0.0.1 address", addrs)
	}
	nodes := s.Nodes()
	if len(nodes) != 2 || s.Master() != nodes[0] {
		t.Fatalf("Nodes() = %d nodes, Master() = %v; want 2 nodes, the first the master", len(nodes), s.Master())
	}
	if role, err := roleOf(addrs[0]); err != nil || role != "sentinel" {
		t.Fatalf("ROLE on the sentinel = %q, %v; want sentinel", role, err)
	}
	if role, err := roleOf(nodes[1].Addr()); err != nil || role != "slave" {
		t.Fatalf("ROLE on the replica = %q, %v; want slave", role, err)
	}

	ctx := t.Context()
	c := s.Client(t)
	if err := c.Set(ctx, "before", "1", 0).Err(); err != nil {
		t.Fatalf("SET through the failover client: %v", err)
	}
	if got, err := c.Get(ctx, "before").Result(); err != nil || got != "1" {
		t.Fatalf("GET before = %q, %v; want 1", got, err)
	}
	if port := serverPort(t, ctx, c); port != portOf(t, nodes[0].Addr()) {
		t.Fatalf("failover client talks to port %s, want the master's %s", port, nodes[0].Addr())
	}
	// Let the write reach the replica, so it survives the failover.
	if n, err := c.Do(ctx, "WAIT", 1, 5000).Int(); err != nil || n != 1 {
		t.Fatalf("WAIT 1 = %d, %v; want 1", n, err)
	}

	start := time.Now()
	s.Failover(t)
	t.Logf("failover took %v", time.Since(start))
	m := s.Master()
	if m != nodes[1] {
		t.Fatalf("Master() after Failover = %s, want the replica %s", m.Addr(), nodes[1].Addr())
	}

	// The client's first commands may fail while it rediscovers the master.
	var err error
	deadline := time.Now().Add(15 * time.Second)
	for attempt := 1; ; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err = c.Set(cctx, "after", "2", 0).Err()
		cancel()
		if err == nil {
			t.Logf("SET after failover succeeded at attempt %d", attempt)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("SET through the failover client after Failover: still failing after 15s: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for key, want := range map[string]string{"before": "1", "after": "2"} {
		if got, err := c.Get(ctx, key).Result(); err != nil || got != want {
			t.Fatalf("GET %s after failover = %q, %v; want %s", key, got, err, want)
		}
	}
	if port := serverPort(t, ctx, c); port != portOf(t, m.Addr()) {
		t.Fatalf("failover client talks to port %s after Failover, want the new master's %s", port, m.Addr())
	}
}

// serverPort returns the tcp_port the server behind c reports.
func serverPort(t *testing.T, ctx context.Context, c *redis.Client) string {
	t.Helper()
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		t.Fatalf("INFO server: %v", err)
	}
	return infoField(info, "tcp_port")
}

func portOf(t *testing.T, addr string) string {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("SplitHostPort(%q): %v", addr, err)
	}
	return port
}

func TestStartSentinelNoReplicas(t *testing.T) {
	s := StartSentinel(t, 0)
	c := s.Client(t)
	if err := c.Ping(t.Context()).Err(); err != nil {
		t.Fatalf("PING through the failover client: %v", err)
	}
}

// TestSentinelFailoverTwice fails over twice on a deployment with two
// replicas: the second Failover waits for the first to have ended and for
// the remaining replica to follow the new master.
func TestSentinelFailoverTwice(t *testing.T) {
	s := StartSentinel(t, 2)
	nodes := s.Nodes()
	seen := map[*Server]bool{s.Master(): true}
	for i := range 2 {
		start := time.Now()
		s.Failover(t)
		m := s.Master()
		t.Logf("failover %d took %v; master now %s", i+1, time.Since(start), m.Addr())
		if seen[m] {
			t.Fatalf("failover %d: Master() = %s, a node that was master before", i+1, m.Addr())
		}
		seen[m] = true
		if role, err := roleOf(m.Addr()); err != nil || role != "master" {
			t.Fatalf("failover %d: ROLE on %s = %q, %v; want master", i+1, m.Addr(), role, err)
		}
	}
	if len(seen) != len(nodes) {
		t.Fatalf("%d distinct masters over two failovers, want %d", len(seen), len(nodes))
	}
	c := s.Client(t)
	deadline := time.Now().Add(15 * time.Second)
	for {
		cctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		err := c.Set(cctx, "k", "v", 0).Err()
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("SET through a new failover client after two failovers: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestSentinelFailoverLosesStalledWrites: a write the master acknowledged
// after StallReplication is gone after FailoverAfterKill resumes the replica and
// the sentinel promotes it; a write made before survives. This is how a
// test makes a failover lose writes on purpose. (With the replica only
// paused, the write survived: it was in the replica's socket buffer.)
func TestSentinelFailoverLosesStalledWrites(t *testing.T) {
	s := StartSentinel(t, 1)
	ctx := t.Context()
	replica := s.Nodes()[1]
	c := redis.NewClient(&redis.Options{Addr: s.Master().Addr()})
	defer c.Close()
	if err := c.Set(ctx, "kept", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Do(ctx, "WAIT", 1, 5000).Int(); err != nil || n != 1 {
		t.Fatalf("WAIT 1 = %d, %v; want 1", n, err)
	}
	resume := s.StallReplication(t)
	if err := c.Set(ctx, "lost", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	s.FailoverAfterKill(t, resume)
	if s.Master() != replica {
		t.Fatalf("Master() after FailoverAfterKill = %s, want the replica %s", s.Master().Addr(), replica.Addr())
	}
	nc := redis.NewClient(&redis.Options{Addr: replica.Addr()})
	defer nc.Close()
	if n, err := nc.Exists(ctx, "kept", "lost").Result(); err != nil || n != 1 {
		t.Fatalf("EXISTS kept lost on the promoted replica = %d, %v; want 1 (kept only)", n, err)
	}
	if n, _ := nc.Exists(ctx, "lost").Result(); n != 0 {
		t.Fatal("the write made while the replica was paused survived the failover")
	}
}
