package redistest

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster is a private Redis Cluster owned by one test: masters, and with
// [StartClusterReplicas] replicas of each.
type Cluster struct {
	nodes    []*Server
	masters  int
	replicas int
}

// StartCluster starts masters redis-server processes (at least 3) with
// --cluster-enabled yes on free loopback ports, each in its own temp dir,
// joins them with `redis-cli --cluster create ... --cluster-replicas 0
// --cluster-yes`, and waits (at most [ReadyTimeout]) until CLUSTER INFO
// reports cluster_state:ok with all 16384 slots covered and every node known
// on every node. It skips t, like [Require], when redis-server or redis-cli
// is missing. t.Cleanup kills every node.
func StartCluster(t testing.TB, masters int) *Cluster {
	t.Helper()
	return StartClusterReplicas(t, masters, 0)
}

// StartClusterReplicas is [StartCluster] with replicas replicas of each
// master (`--cluster-replicas replicas`: redis-cli makes the first masters
// nodes masters and the rest their replicas), and waits too until every
// replica reports its link to its master up. [Cluster.ReplicasOf] tells
// which node replicates which master.
func StartClusterReplicas(t testing.TB, masters, replicas int) *Cluster {
	t.Helper()
	return StartClusterWith(t, ClusterOptions{Masters: masters, Replicas: replicas})
}

// ClusterOptions configures a Cluster started by [StartClusterWith]. The
// zero value of each field but Masters is what [StartClusterReplicas] uses.
type ClusterOptions struct {
	// Masters is the number of masters, at least 3.
	Masters int
	// Replicas is the number of replicas of each master (0: none).
	Replicas int
	// PartialCoverage starts every node with
	// `--cluster-require-full-coverage no`: once the cluster deems a master
	// failed (a master that stopped answering for [ClusterNodeTimeout], with
	// no replica to promote), the other masters keep serving their slots,
	// where Redis's default (yes) makes every node answer CLUSTERDOWN for
	// every slot until the failed master's slots are covered again. A test
	// that pauses a master past the node timeout and checks that the rest
	// of the cluster goes on needs it.
	PartialCoverage bool
	// Args are extra redis-server arguments for every node, appended after
	// the ones this package sets.
	Args []string
}

// StartClusterWith starts a Cluster as o says, as [StartClusterReplicas]
// does (it is StartClusterWith with o.Masters and o.Replicas alone): it
// waits until every node reports cluster_state:ok with all slots covered
// and every replica its link up, skips t when redis-server or redis-cli is
// missing, and t.Cleanup kills every node.
func StartClusterWith(t testing.TB, o ClusterOptions) *Cluster {
	t.Helper()
	Require(t)
	requireBinary(t, "redis-cli")
	masters, replicas := o.Masters, o.Replicas
	if masters < 3 {
		t.Fatalf("redistest: StartCluster needs at least 3 masters, got %d", masters)
	}
	if replicas < 0 {
		t.Fatalf("redistest: StartClusterReplicas: negative replica count %d", replicas)
	}
	args := []string{
		"--cluster-enabled", "yes",
		"--cluster-config-file", "nodes.conf",
		"--cluster-node-timeout", strconv.Itoa(int(ClusterNodeTimeout.Milliseconds())),
	}
	if o.PartialCoverage {
		args = append(args, "--cluster-require-full-coverage", "no")
	}
	args = append(args, o.Args...)
	c := &Cluster{masters: masters, replicas: replicas}
	for i := 0; i < masters*(1+replicas); i++ {
		c.nodes = append(c.nodes, start(t, Options{Args: args}, true))
	}
	addrs := c.Addrs()

	ctx, cancel := context.WithTimeout(context.Background(), 3*ReadyTimeout)
	defer cancel()
	cli := append([]string{"--cluster", "create"}, addrs...)
	cli = append(cli, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	out, err := exec.CommandContext(ctx, "redis-cli", cli...).CombinedOutput()
	if err != nil {
		t.Fatalf("redistest: redis-cli %s: %v\n%s\n%s", strings.Join(cli, " "), err, out, c.logTails())
	}

	deadline := time.Now().Add(ReadyTimeout)
	for {
		err := c.checkOK()
		if err == nil {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: cluster %v not ready after %v: %v\n%s", addrs, ReadyTimeout, err, c.logTails())
		}
		time.Sleep(pollInterval * 5)
	}
}

// checkOK returns nil when every node reports a healthy, fully covered
// cluster that knows all nodes.
func (c *Cluster) checkOK() error {
	want := map[string]string{
		"cluster_state":          "ok",
		"cluster_slots_assigned": "16384",
		"cluster_slots_ok":       "16384",
		"cluster_known_nodes":    strconv.Itoa(len(c.nodes)),
		"cluster_size":           strconv.Itoa(c.masters),
	}
	for _, n := range c.nodes {
		info, err := clusterInfo(n.Addr())
		if err != nil {
			return fmt.Errorf("%s: CLUSTER INFO: %w", n.Addr(), err)
		}
		for k, v := range want {
			if got := infoField(info, k); got != v {
				return fmt.Errorf("%s: %s is %q, want %q", n.Addr(), k, got, v)
			}
		}
	}
	if c.replicas == 0 {
		return nil
	}
	linked := 0
	for _, n := range c.nodes {
		if role, err := roleOf(n.Addr()); err != nil || role != "slave" {
			continue
		}
		if err := linkUp(n.Addr()); err != nil {
			return fmt.Errorf("replica %s: %w", n.Addr(), err)
		}
		linked++
	}
	if want := c.masters * c.replicas; linked != want {
		return fmt.Errorf("%d replicas linked to their masters, want %d", linked, want)
	}
	return nil
}

// ReplicasOf returns the nodes that replicate the master at addr now (from
// INFO replication on each node), for a test that checks what reached a
// replica or pauses one.
func (c *Cluster) ReplicasOf(t testing.TB, addr string) []*Server {
	t.Helper()
	_, port, _ := strings.Cut(addr, ":")
	var out []*Server
	for _, n := range c.nodes {
		rc, err := dialRaw(n.Addr(), time.Second)
		if err != nil {
			continue // a node killed or paused by the test
		}
		info, err := rc.do("INFO", "replication")
		rc.Close()
		if err == nil && infoField(info, "role") == "slave" && infoField(info, "master_port") == port {
			out = append(out, n)
		}
	}
	return out
}

// ClusterNodeTimeout is the cluster-node-timeout every node of a [Cluster]
// runs with (Redis's default is 15s): a master unreachable that long is
// deemed failing, and its replica is promoted about a second later.
const ClusterNodeTimeout = 5 * time.Second

// FailOver kills (SIGKILL) the node at addr, a master, and waits (at most
// [FailoverTimeout]) until one of the nodes that replicated it answers ROLE
// as a master: the Cluster promoted it, after [ClusterNodeTimeout] and a
// vote. It returns the killed node, the promoted one, and when the killed
// node was seen dead (Kill returned). Writes the master had not yet
// replicated are lost. The killed node stays down: restart it before the
// test ends ([Server.Restart]; it rejoins as a replica), since go-redis's
// pools redial a dead address every second from goroutines of their own,
// which goleak would find. FailOver fails t when addr is no node of c or
// has no replica.
func (c *Cluster) FailOver(t testing.TB, addr string) (victim, promoted *Server, killed time.Time) {
	t.Helper()
	for _, n := range c.nodes {
		if n.Addr() == addr {
			victim = n
		}
	}
	if victim == nil {
		t.Fatalf("redistest: FailOver: no node at %s", addr)
	}
	replicas := c.ReplicasOf(t, addr)
	if len(replicas) == 0 {
		t.Fatalf("redistest: FailOver: master %s has no replica", addr)
	}
	victim.Kill(t)
	killed = time.Now()
	deadline := killed.Add(FailoverTimeout)
	for {
		for _, r := range replicas {
			if role, err := roleOf(r.Addr()); err == nil && role == "master" {
				return victim, r, killed
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: FailOver: no replica of %s promoted within %v\n%s", addr, FailoverTimeout, c.logTails())
		}
		time.Sleep(pollInterval)
	}
}

func clusterInfo(addr string) (string, error) {
	rc, err := dialRaw(addr, time.Second)
	if err != nil {
		return "", err
	}
	defer rc.Close()
	return rc.do("CLUSTER", "INFO")
}

func (c *Cluster) logTails() string {
	var b strings.Builder
	for _, n := range c.nodes {
		b.WriteString(n.logTail())
		b.WriteByte('\n')
	}
	return b.String()
}

// Addrs returns the "127.0.0.1:port" address of every node, in start order.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		addrs[i] = n.Addr()
	}
	return addrs
}

// Nodes returns the node servers, in start order, so a test can kill, pause
// or read the log of a single node. The slice is a copy.
func (c *Cluster) Nodes() []*Server {
	return append([]*Server(nil), c.nodes...)
}

// ClientOptions returns the options [Cluster.Client] uses: Addrs set to
// every node and everything else at go-redis's defaults, as a user builds a
// Cluster client (so ctx deadlines are ignored). Adjust them and pass them to
// redis.NewClusterClient for a client with other settings (the caller
// closes it).
func (c *Cluster) ClientOptions() *redis.ClusterOptions {
	return &redis.ClusterOptions{Addrs: c.Addrs()}
}

// Client returns a new go-redis cluster client built from
// [Cluster.ClientOptions]. t.Cleanup closes it.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	t.Helper()
	cc := redis.NewClusterClient(c.ClientOptions())
	t.Cleanup(func() { cc.Close() })
	return cc
}
