package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// SentinelMasterName is the name under which the sentinel of
// [StartSentinel] monitors its master.
const SentinelMasterName = "lbmaster"

// Sentinel timing, written to sentinel.conf: the master is deemed down after
// sentinelDownAfter without a valid reply, and a failover attempt is given
// sentinelFailoverTimeout. The sentinel creates its link to a new master at
// the switch and counts the time since then as waiting for a PONG; with
// down-after-milliseconds 1000 (equal to its PING period), a promoted master
// that answered its first PING more than a second after the switch, on a
// loaded machine, was deemed down and failed over again: the sentinel's log
// of such a run of TestSentinelFailoverUnderLoad (2026-11-28) shows
// +switch-master to the first replica, +sdown of it 1.001s later, and a
// second +switch-master to the other replica, which deposed a master that
// had taken writes for a second. 2000 leaves a second of slack.
const (
	sentinelDownAfter       = 2000 * time.Millisecond
	sentinelFailoverTimeout = 3000 * time.Millisecond
)

// FailoverTimeout bounds [Sentinel.Failover]: from killing the master until
// the sentinel reports a new master that answers ROLE as one.
const FailoverTimeout = 20 * time.Second

// Sentinel is a private Redis Sentinel deployment owned by one test: a
// master, its replicas, and one sentinel process monitoring them under
// [SentinelMasterName] with a quorum of 1. Its methods are safe for
// concurrent use.
type Sentinel struct {
	dir      string // the sentinel's working directory
	confPath string
	logPath  string

	mu     sync.Mutex
	port   int
	proc   *process // the sentinel; nil once cleaned up
	nodes  []*Server
	master *Server // the node the sentinel last reported as master
}

// StartSentinel starts a master (as [Start] does), replicas redis-server
// processes replicating from it (--replicaof, each on a free loopback port
// in its own temp dir), and one sentinel (redis-server sentinel.conf
// --sentinel, its writable sentinel.conf and log in a temp dir of their
// own) that monitors the master as [SentinelMasterName], deems it down after
// two seconds and gives a failover three seconds. It waits (each step at most
// [ReadyTimeout]) until every replica reports master_link_status:up and the
// sentinel reports the master's address, has had a PING answered by it (see
// [Sentinel.Failover]) and knows every replica.
//
// It calls [Require] first, so it skips t when redis-server is not
// installed. t.Cleanup kills the sentinel and every node with SIGKILL and
// reaps them. All nodes run with --repl-diskless-sync-delay 0 so that a
// replica (or a promoted one's replicas) syncs at once.
func StartSentinel(t testing.TB, replicas int) *Sentinel {
	t.Helper()
	Require(t)
	if replicas < 0 {
		t.Fatalf("redistest: StartSentinel: negative replica count %d", replicas)
	}
	nodeArgs := []string{"--repl-diskless-sync-delay", "0"}
	master := start(t, Options{Args: nodeArgs}, false)
	s := &Sentinel{nodes: []*Server{master}, master: master}
	_, masterPort, _ := net.SplitHostPort(master.Addr())
	for i := 0; i < replicas; i++ {
		args := append(append([]string(nil), nodeArgs...), "--replicaof", "127.0.0.1", masterPort)
		s.nodes = append(s.nodes, start(t, Options{Args: args}, false))
	}
	for _, r := range s.nodes[1:] {
		s.waitFor(t, fmt.Sprintf("replica %s linked to master %s", r.Addr(), master.Addr()), ReadyTimeout, func() error {
			return linkUp(r.Addr())
		})
	}

	s.dir = t.TempDir()
	s.confPath = filepath.Join(s.dir, "sentinel.conf")
	s.logPath = filepath.Join(s.dir, "sentinel.log")
	t.Cleanup(s.cleanup) // registered after the nodes': runs before theirs
	func() {
		s.mu.Lock()
		defer s.mu.Unlock() // also when launch fails t
		s.launch(t, master.Addr())
	}()

	s.waitFor(t, "sentinel reporting the master and its replicas", ReadyTimeout, func() error {
		addr, err := s.reportedMaster()
		if err != nil {
			return err
		}
		if addr != master.Addr() {
			return fmt.Errorf("sentinel reports master %s, want %s", addr, master.Addr())
		}
		if err := s.settled(addr); err != nil {
			return err
		}
		n, err := s.healthyReplicas()
		if err != nil {
			return err
		}
		if n != replicas {
			return fmt.Errorf("sentinel knows %d healthy replicas, want %d", n, replicas)
		}
		return nil
	})
	return s
}

// MasterName returns the name the sentinel monitors the master under,
// [SentinelMasterName].
func (s *Sentinel) MasterName() string { return SentinelMasterName }

// SentinelAddrs returns the address of the sentinel, "127.0.0.1:port", as
// the only element of a new slice.
func (s *Sentinel) SentinelAddrs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return []string{s.addrLocked()}
}

func (s *Sentinel) addrLocked() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
}

// Master returns the node that is master: the one started as master until
// [Sentinel.Failover] has promoted another.
func (s *Sentinel) Master() *Server {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.master
}

// Nodes returns every redis-server of the deployment (not the sentinel), the
// one started as master first, then the replicas in start order. The slice
// is a copy.
func (s *Sentinel) Nodes() []*Server {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*Server(nil), s.nodes...)
}

// Log returns the contents of the sentinel's log file, for failure
// messages; "" if it cannot be read.
func (s *Sentinel) Log() string {
	b, err := os.ReadFile(s.logPath)
	if err != nil {
		return ""
	}
	return string(b)
}

// ClientOptions returns the options [Sentinel.Client] uses: MasterName and
// SentinelAddrs set and everything else at go-redis's defaults, as a user
// builds a failover client (so ctx deadlines are ignored). Adjust them and pass them
// to redis.NewFailoverClient for a client with other settings (the caller
// closes it).
func (s *Sentinel) ClientOptions() *redis.FailoverOptions {
	return &redis.FailoverOptions{
		MasterName:    s.MasterName(),
		SentinelAddrs: s.SentinelAddrs(),
	}
}

// Client returns a new go-redis failover client (redis.NewFailoverClient)
// built from [Sentinel.ClientOptions]: it asks the sentinel for the master
// on each dial, so it follows a [Sentinel.Failover] (its first commands
// after one may fail). t.Cleanup closes it.
func (s *Sentinel) Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewFailoverClient(s.ClientOptions())
	t.Cleanup(func() { c.Close() })
	return c
}

// Failover kills the current master with SIGKILL and waits (at most
// [FailoverTimeout]) until the sentinel has completed a failover: it reports
// another node as master, monitors that node with no failover in progress
// and has had a PING answered by it, and the node answers ROLE as a master.
// [Sentinel.Master] returns it from then on. Writes the killed master had
// not yet replicated are lost; the killed node stays down.
//
// Before killing, Failover waits (at most [FailoverTimeout]) until the sentinel
// knows a healthy replica to promote, so that it can be called again on a
// deployment with replicas left (the sentinel points them at the new master
// as part of the failover). It fails t at once when no replica is running.
func (s *Sentinel) Failover(t testing.TB) { s.FailoverAfterKill(t, nil) }

// FailoverAfterKill is [Sentinel.Failover], calling afterKill (when not
// nil) once the master is killed, before waiting for the promotion: a test
// that stalled replication ([Sentinel.StallReplication]) to make the
// master's last writes unreplicated resumes the replicas there, so that
// the promoted one lacks them. afterKill must not call the Sentinel's
// methods (Failover holds its lock); a *Server's are fine.
func (s *Sentinel) FailoverAfterKill(t testing.TB, afterKill func()) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	live := 0
	for _, n := range s.nodes {
		if n != s.master && n.running() {
			live++
		}
	}
	if live == 0 {
		t.Fatalf("redistest: Failover: no live replica of master %s to promote", s.master.Addr())
	}
	// Kill the node the sentinel reports now, settled, with a replica to
	// promote (normally s.master: a spurious failover would have moved it).
	var old *Server
	// A sentinel learns of a replica that follows a new master from that
	// master's INFO, which it reads every 10s: wait longer than that.
	s.waitForLocked(t, "a settled master with a healthy replica", FailoverTimeout, func() error {
		addr, err := s.reportedMaster()
		if err != nil {
			return err
		}
		if old = s.nodeAt(addr); old == nil {
			return fmt.Errorf("sentinel reports master %s, which is none of this deployment's nodes", addr)
		}
		if err := s.settled(addr); err != nil {
			return err
		}
		n, err := s.healthyReplicas()
		if err == nil && n == 0 {
			err = fmt.Errorf("sentinel knows no healthy replica of %s", addr)
		}
		return err
	})
	oldAddr := old.Addr()
	old.Kill(t)
	if afterKill != nil {
		afterKill()
	}
	var promoted *Server
	s.waitForLocked(t, fmt.Sprintf("failover away from %s", oldAddr), FailoverTimeout, func() error {
		addr, err := s.reportedMaster()
		if err != nil {
			return err
		}
		if addr == oldAddr {
			return fmt.Errorf("sentinel still reports the killed master %s", addr)
		}
		n := s.nodeAt(addr)
		if n == nil {
			return fmt.Errorf("sentinel reports master %s, which is none of this deployment's nodes", addr)
		}
		if err := s.settled(addr); err != nil {
			return err
		}
		role, err := roleOf(addr)
		if err != nil {
			return fmt.Errorf("ROLE on %s: %w", addr, err)
		}
		if role != "master" {
			return fmt.Errorf("sentinel reports master %s, which answers ROLE %q", addr, role)
		}
		promoted = n
		return nil
	})
	s.master = promoted
}

// StallReplication pauses every replica (SIGSTOP) and then closes the
// master's replication links to them (CLIENT KILL TYPE replica), so that
// the writes the master acknowledges from then on reach no replica: a
// paused replica alone would still read, once resumed, what the master had
// written into its socket. It returns a func that resumes the replicas
// (they then reconnect and catch up, unless the master is gone: pass it to
// [Sentinel.FailoverAfterKill]). The sentinel deems a paused replica down
// after down-after-milliseconds (2s): fail over before that.
func (s *Sentinel) StallReplication(t testing.TB) (resume func()) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var paused []*Server
	for _, n := range s.nodes {
		if n != s.master && n.running() {
			n.Pause(t)
			paused = append(paused, n)
		}
	}
	if _, err := rawCommand(s.master.Addr(), "CLIENT", "KILL", "TYPE", "replica"); err != nil {
		t.Fatalf("redistest: CLIENT KILL TYPE replica on master %s: %v", s.master.Addr(), err)
	}
	return func() {
		for _, n := range paused {
			n.Resume(t)
		}
	}
}

// nodeAt returns the node listening on addr, or nil.
func (s *Sentinel) nodeAt(addr string) *Server {
	for _, n := range s.nodes {
		if n.Addr() == addr {
			return n
		}
	}
	return nil
}

// running reports whether the server process is up (not killed or stopped).
func (s *Server) running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc != nil
}

// waitFor polls check every few poll intervals until it returns nil, and
// fails t with the last error and the logs after timeout.
func (s *Sentinel) waitFor(t testing.TB, what string, timeout time.Duration, check func() error) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.waitForLocked(t, what, timeout, check)
}

func (s *Sentinel) waitForLocked(t testing.TB, what string, timeout time.Duration, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: waiting for %s: not done after %v: %v\n%s", what, timeout, err, s.logTails())
		}
		time.Sleep(pollInterval * 5)
	}
}

// logTails returns the tails of the sentinel's and every node's log.
func (s *Sentinel) logTails() string {
	var b strings.Builder
	if s.logPath != "" {
		const n = 40
		lines := strings.Split(strings.TrimRight(s.Log(), "\n"), "\n")
		if len(lines) > n {
			lines = lines[len(lines)-n:]
		}
		fmt.Fprintf(&b, "--- last %d lines of %s ---\n%s\n", len(lines), s.logPath, strings.Join(lines, "\n"))
	}
	for _, n := range s.nodes {
		b.WriteString(n.logTail())
		b.WriteByte('\n')
	}
	return b.String()
}

// launch writes sentinel.conf for a free port and starts the sentinel,
// retrying with another port when the chosen one turns out to be taken.
func (s *Sentinel) launch(t testing.TB, masterAddr string) {
	t.Helper()
	host, port, _ := net.SplitHostPort(masterAddr)
	var lastErr error
	for i := 0; i < 10; i++ {
		p, err := freePort(false)
		if err != nil {
			t.Fatalf("redistest: no free port: %v", err)
		}
		s.port = p
		// A fresh file per attempt: the sentinel rewrites it as it runs.
		conf := strings.Join([]string{
			"port " + strconv.Itoa(p),
			"bind 127.0.0.1",
			"protected-mode no",
			"daemonize no",
			"dir " + quoteConf(s.dir),
			"logfile " + quoteConf(s.logPath),
			fmt.Sprintf("sentinel monitor %s %s %s 1", SentinelMasterName, host, port),
			fmt.Sprintf("sentinel down-after-milliseconds %s %d", SentinelMasterName, sentinelDownAfter.Milliseconds()),
			fmt.Sprintf("sentinel failover-timeout %s %d", SentinelMasterName, sentinelFailoverTimeout.Milliseconds()),
			"",
		}, "\n")
		if err := os.WriteFile(s.confPath, []byte(conf), 0o644); err != nil {
			t.Fatalf("redistest: write %s: %v", s.confPath, err)
		}
		proc, err := s.spawn()
		if err != nil {
			t.Fatalf("redistest: start redis-server --sentinel: %v", err)
		}
		err = waitReady(s.addrLocked(), proc, ReadyTimeout)
		if err == nil {
			s.proc = proc
			return
		}
		lastErr = err
		_ = proc.kill()
		if !errors.Is(err, errExited) {
			break
		}
	}
	t.Fatalf("redistest: sentinel on %s did not become ready: %v\n%s", s.addrLocked(), lastErr, s.logTails())
}

// quoteConf quotes a value for a redis configuration file.
func quoteConf(v string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`)
	return `"` + r.Replace(v) + `"`
}

// spawn starts the sentinel process and a goroutine that reaps it.
func (s *Sentinel) spawn() (*process, error) {
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child holds its own copy
	fmt.Fprintf(logf, "### redistest: starting sentinel on port %d at %s\n", s.port, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command("redis-server", s.confPath, "--sentinel")
	cmd.Dir = s.dir
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// cleanup kills and reaps the sentinel; the nodes clean up after themselves.
func (s *Sentinel) cleanup() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		_ = s.proc.kill()
		s.proc = nil
	}
}

// sentinelDo runs one command on the sentinel over a raw connection.
func (s *Sentinel) sentinelDo(args ...string) (any, error) {
	return rawCommand(net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)), args...)
}

// reportedMaster returns the master address the sentinel reports.
func (s *Sentinel) reportedMaster() (string, error) {
	v, err := s.sentinelDo("SENTINEL", "GET-MASTER-ADDR-BY-NAME", SentinelMasterName)
	if err != nil {
		return "", fmt.Errorf("SENTINEL GET-MASTER-ADDR-BY-NAME: %w", err)
	}
	a, ok := v.([]any)
	if !ok || len(a) != 2 {
		return "", fmt.Errorf("SENTINEL GET-MASTER-ADDR-BY-NAME: got %v, want [host port]", v)
	}
	host, _ := a[0].(string)
	port, _ := a[1].(string)
	return net.JoinHostPort(host, port), nil
}

// masterState returns the sentinel's view of the monitored master, SENTINEL
// MASTER, as field/value pairs (ip, port, flags, num-slaves, ...).
func (s *Sentinel) masterState() (map[string]string, error) {
	v, err := s.sentinelDo("SENTINEL", "MASTER", SentinelMasterName)
	if err != nil {
		return nil, fmt.Errorf("SENTINEL MASTER: %w", err)
	}
	fields, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("SENTINEL MASTER: got %v, want an array", v)
	}
	return pairs(fields), nil
}

// settled returns nil when the sentinel monitors the master at addr with
// nothing in progress: no failover (the reported address changes before a
// failover ends, while the other replicas are pointed at the new master; the
// monitored master's own address and flags change when it has ended), not
// down, reporting itself a master, and no PING left unanswered. The last
// matters because a link to a master is created anew on a switch (and at
// start), and the sentinel counts the time since then as waiting for a
// PONG: a first PONG that arrives more than down-after-milliseconds after
// the switch, on a loaded machine, marks the new master down and starts a
// spurious failover (see sentinelDownAfter). Once a PONG has come back, only
// a master that really stops answering for a whole down-after period is.
func (s *Sentinel) settled(addr string) error {
	m, err := s.masterState()
	if err != nil {
		return err
	}
	if got := net.JoinHostPort(m["ip"], m["port"]); got != addr {
		return fmt.Errorf("sentinel monitors master %s, want %s", got, addr)
	}
	if m["flags"] != "master" || m["role-reported"] != "master" || m["last-ping-sent"] != "0" {
		return fmt.Errorf("sentinel's master %s not settled: flags %q, role-reported %q, last-ping-sent %q ms, want master, master, 0",
			addr, m["flags"], m["role-reported"], m["last-ping-sent"])
	}
	return nil
}

// healthyReplicas returns how many replicas the sentinel knows that are
// neither down nor disconnected and report their link to the master up:
// the ones it could promote.
func (s *Sentinel) healthyReplicas() (int, error) {
	v, err := s.sentinelDo("SENTINEL", "REPLICAS", SentinelMasterName)
	if err != nil {
		return 0, fmt.Errorf("SENTINEL REPLICAS: %w", err)
	}
	list, ok := v.([]any)
	if !ok {
		return 0, fmt.Errorf("SENTINEL REPLICAS: got %v, want an array", v)
	}
	n := 0
	for _, r := range list {
		fields, _ := r.([]any)
		m := pairs(fields)
		if m["flags"] == "slave" && m["master-link-status"] == "ok" {
			n++
		}
	}
	return n, nil
}

// pairs turns a flat field/value reply into a map; non-string elements are
// read as "".
func pairs(fields []any) map[string]string {
	m := make(map[string]string, len(fields)/2)
	for i := 0; i+1 < len(fields); i += 2 {
		k, _ := fields[i].(string)
		v, _ := fields[i+1].(string)
		m[k] = v
	}
	return m
}

// linkUp returns nil when the replica at addr reports its link to the
// master up.
func linkUp(addr string) error {
	rc, err := dialRaw(addr, time.Second)
	if err != nil {
		return err
	}
	defer rc.Close()
	info, err := rc.do("INFO", "replication")
	if err != nil {
		return fmt.Errorf("INFO replication: %w", err)
	}
	if got := infoField(info, "master_link_status"); got != "up" {
		return fmt.Errorf("master_link_status is %q, want up", got)
	}
	return nil
}

// roleOf returns the first element of ROLE on addr: "master", "slave" or
// "sentinel".
func roleOf(addr string) (string, error) {
	v, err := rawCommand(addr, "ROLE")
	if err != nil {
		return "", err
	}
	a, ok := v.([]any)
	if !ok || len(a) == 0 {
		return "", fmt.Errorf("got %v, want an array", v)
	}
	role, _ := a[0].(string)
	return role, nil
}

// rawCommand dials addr, sends one command and reads one reply of any RESP2
// type: a string (simple or bulk), an int64, nil (null bulk or array), or a
// []any. An error reply comes back as an error.
func rawCommand(addr string, args ...string) (any, error) {
	rc, err := dialRaw(addr, time.Second)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(rc.c, b.String()); err != nil {
		return nil, err
	}
	return readReply(rc.r, 0)
}

func readReply(r *bufio.Reader, depth int) (any, error) {
	if depth > 8 {
		return nil, errors.New("redistest: reply nested too deeply")
	}
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return nil, errors.New("redistest: empty reply line")
	}
	switch line[0] {
	case '+':
		return line[1:], nil
	case '-':
		return nil, errors.New(line[1:])
	case ':':
		return strconv.ParseInt(line[1:], 10, 64)
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return nil, fmt.Errorf("redistest: bad bulk length %q", line)
		}
		if n < 0 {
			return nil, nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return nil, fmt.Errorf("redistest: bad array length %q", line)
		}
		if n < 0 {
			return nil, nil
		}
		a := make([]any, n)
		for i := range a {
			if a[i], err = readReply(r, depth+1); err != nil {
				return nil, err
			}
		}
		return a, nil
	default:
		return nil, fmt.Errorf("redistest: unsupported reply %q", line)
	}
}
