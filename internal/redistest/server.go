package redistest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Options configures a server started by [Start]. The zero value is a plain
// in-memory server with persistence off.
type Options struct {
	// AppendOnly turns on the append-only file with fsync on every write
	// (--appendonly yes --appendfsync always), so data written before
	// [Server.Kill] or [Server.Stop] survives [Server.Restart].
	// Default: off, and RDB snapshots are off too (--save "").
	AppendOnly bool
	// Args are extra redis-server arguments, appended after the ones this
	// package sets, e.g. []string{"--maxmemory", "10mb"}.
	Args []string
}

// Server is a private redis-server process owned by one test. Its methods
// are safe for concurrent use; the ones that take a testing.TB fail it (with
// the tail of the server log) when the process does not behave as expected.
type Server struct {
	opts    Options
	dir     string
	logPath string
	cluster bool // node of a Cluster: the port must leave room for the bus port

	mu     sync.Mutex
	port   int
	proc   *process // nil when not running
	paused bool
}

// process is one run of redis-server. done is closed once Wait has returned;
// err is valid after that.
type process struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// errExited reports that redis-server exited before answering, typically
// because its port was taken.
var errExited = errors.New("redistest: redis-server exited before it was ready")

// Start starts a private redis-server on a free loopback port with its data
// directory and log file in t.TempDir(), and waits (at most [ReadyTimeout])
// until it answers PING. It calls [Require] first, so it skips t when
// redis-server is not installed. If the chosen port turns out to be taken,
// Start retries with another one. t.Cleanup kills the server with SIGKILL
// and reaps it.
//
// The server runs with --bind 127.0.0.1 --protected-mode no, and with
// --save "" unless o.AppendOnly is set.
func Start(t testing.TB, o Options) *Server {
	t.Helper()
	Require(t)
	return start(t, o, false)
}

func start(t testing.TB, o Options, cluster bool) *Server {
	t.Helper()
	dir := t.TempDir()
	s := &Server{
		opts:    Options{AppendOnly: o.AppendOnly, Args: append([]string(nil), o.Args...)},
		dir:     dir,
		logPath: filepath.Join(dir, "redis.log"),
		cluster: cluster,
	}
	t.Cleanup(s.cleanup)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.launch(t, true)
	return s
}

// Addr returns the server's address, "127.0.0.1:port". It stays the same
// across [Server.Restart].
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addrLocked()
}

func (s *Server) addrLocked() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
}

// URL returns the server's address as a URL for database 0,
// "redis://127.0.0.1:port/0", suitable for redis.ParseURL.
func (s *Server) URL() string {
	return "redis://" + s.Addr() + "/0"
}

// Dir returns the server's data directory (its working directory, holding
// the log and any AOF/RDB files).
func (s *Server) Dir() string { return s.dir }

// ClientOptions returns the options [Server.Client] uses: exactly those
// redisstreams.NewURL builds from [Server.URL] (go-redis's defaults, with
// ContextTimeoutEnabled on, so a context deadline bounds each command even
// while the server is paused). Adjust them and pass them to redis.NewClient
// for a client with other settings (the caller closes it). Tests that prove
// behaviour with go-redis's plain defaults build their clients directly.
func (s *Server) ClientOptions() *redis.Options {
	o, err := redis.ParseURL(s.URL())
	if err != nil {
		panic("redistest: " + err.Error()) // the URL is ours
	}
	o.ContextTimeoutEnabled = true // as redisstreams.NewURL sets it
	return o
}

// Client returns a new go-redis client connected to the server, built from
// [Server.ClientOptions]. t.Cleanup closes it. The client survives
// [Server.Restart] (it reconnects).
func (s *Server) Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(s.ClientOptions())
	t.Cleanup(func() { c.Close() })
	return c
}

// Kill sends SIGKILL to the server and waits for it to exit. Data not yet
// written to the AOF is lost. Kill does nothing when the server is not
// running.
func (s *Server) Kill(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.killLocked(); err != nil {
		t.Fatalf("%v\n%s", err, s.logTail())
	}
}

// Stop shuts the server down gracefully with SIGTERM (redis-server flushes
// and fsyncs the AOF, as with SHUTDOWN) and waits for it to exit. A paused
// server is resumed first. Stop does nothing when the server is not running;
// it fails t if the server does not exit within [ReadyTimeout] (it is then
// killed) or exits with an error.
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopLocked(t)
}

// Restart starts the server again on the same port and directory and waits
// until it answers PING. A running server is stopped first with
// [Server.Stop]. Binding the old port is retried for a few seconds; t fails
// if another process holds it.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		s.stopLocked(t)
	}
	s.launch(t, false)
}

// Pause sends SIGSTOP to the server: it keeps its connections open but
// answers nothing until [Server.Resume]. On Linux Pause returns once the
// process is seen stopped.
func (s *Server) Pause(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.signalLocked(t, syscall.SIGSTOP)
	s.paused = true
	waitStopState(s.proc.cmd.Process.Pid, true, time.Second)
}

// Resume sends SIGCONT to a server stopped by [Server.Pause].
func (s *Server) Resume(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.signalLocked(t, syscall.SIGCONT)
	s.paused = false
	waitStopState(s.proc.cmd.Process.Pid, false, time.Second)
}

// Log returns the contents of the server's log file (including anything it
// wrote to stdout or stderr), for failure messages. It returns "" if the log
// cannot be read.
func (s *Server) Log() string {
	b, err := os.ReadFile(s.logPath)
	if err != nil {
		return ""
	}
	return string(b)
}

// logTail returns the last lines of the log, framed for a failure message.
func (s *Server) logTail() string {
	const n = 30
	lines := strings.Split(strings.TrimRight(s.Log(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return fmt.Sprintf("--- last %d lines of %s ---\n%s", len(lines), s.logPath, strings.Join(lines, "\n"))
}

func (s *Server) signalLocked(t testing.TB, sig os.Signal) {
	t.Helper()
	if s.proc == nil {
		t.Fatalf("redistest: %s: server on %s is not running", sig, s.addrLocked())
	}
	if err := s.proc.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("redistest: %s to redis-server on %s: %v\n%s", sig, s.addrLocked(), err, s.logTail())
	}
}

func (s *Server) killLocked() error {
	p := s.proc
	if p == nil {
		return nil
	}
	s.proc, s.paused = nil, false
	return p.kill()
}

func (s *Server) stopLocked(t testing.TB) {
	t.Helper()
	p := s.proc
	if p == nil {
		return
	}
	s.proc = nil
	if s.paused {
		s.paused = false
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(ReadyTimeout):
		_ = p.kill()
		t.Fatalf("redistest: redis-server on %s did not exit within %v of SIGTERM; killed\n%s",
			s.addrLocked(), ReadyTimeout, s.logTail())
	}
	if p.err != nil {
		t.Fatalf("redistest: redis-server on %s exited with %v after SIGTERM\n%s", s.addrLocked(), p.err, s.logTail())
	}
}

// cleanup kills and reaps the server; registered with t.Cleanup by Start.
func (s *Server) cleanup() {
	s.mu.Lock()
	defer s.mu.Unlock()
	_ = s.killLocked()
}

// launch starts redis-server and waits until it is ready. With newPort it
// picks a fresh free port per attempt; otherwise it retries the current port
// (Restart), giving a just-closed socket time to be released.
func (s *Server) launch(t testing.TB, newPort bool) {
	t.Helper()
	const attempts = 10
	var lastErr error
	for i := 0; i < attempts; i++ {
		if newPort {
			port, err := freePort(s.cluster)
			if err != nil {
				t.Fatalf("redistest: no free port: %v", err)
			}
			s.port = port
		} else if i > 0 {
			time.Sleep(200 * time.Millisecond)
		}
		p, err := s.spawn()
		if err != nil {
			t.Fatalf("redistest: start redis-server: %v", err)
		}
		err = waitReady(s.addrLocked(), p, ReadyTimeout)
		if err == nil {
			s.proc = p
			return
		}
		lastErr = err
		_ = p.kill()
		if !errors.Is(err, errExited) {
			break
		}
	}
	t.Fatalf("redistest: redis-server on %s did not become ready: %v\n%s", s.addrLocked(), lastErr, s.logTail())
}

// args returns the redis-server command line for the current port.
func (s *Server) args() []string {
	a := []string{
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--protected-mode", "no",
		"--daemonize", "no",
		"--dir", s.dir,
		"--logfile", s.logPath,
	}
	if s.opts.AppendOnly {
		a = append(a, "--appendonly", "yes", "--appendfsync", "always")
	} else {
		a = append(a, "--save", "")
	}
	return append(a, s.opts.Args...)
}

// spawn starts one redis-server process and a goroutine that reaps it.
func (s *Server) spawn() (*process, error) {
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child holds its own copy
	fmt.Fprintf(logf, "### redistest: starting redis-server on port %d at %s\n", s.port, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command("redis-server", s.args()...)
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

// kill sends SIGKILL and waits (bounded) for the reaper goroutine.
func (p *process) kill() error {
	_ = p.cmd.Process.Kill()
	select {
	case <-p.done:
		return nil
	case <-time.After(ReadyTimeout):
		return fmt.Errorf("redistest: redis-server pid %d did not exit within %v of SIGKILL", p.cmd.Process.Pid, ReadyTimeout)
	}
}

// waitReady polls addr until it answers PING and INFO reports p's pid (so a
// different server that grabbed the port is never mistaken for ours). It
// returns errExited if p exits first.
func waitReady(addr string, p *process, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	want := strconv.Itoa(p.cmd.Process.Pid)
	var lastErr error
	for {
		select {
		case <-p.done:
			return fmt.Errorf("%w (%v)", errExited, p.err)
		default:
		}
		lastErr = probe(addr, want)
		if lastErr == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %v: %v", timeout, lastErr)
		}
		select {
		case <-p.done:
		case <-time.After(pollInterval):
		}
	}
}

// probe checks that the server at addr answers PING and has process id pid.
func probe(addr, pid string) error {
	rc, err := dialRaw(addr, time.Second)
	if err != nil {
		return err
	}
	defer rc.Close()
	pong, err := rc.do("PING")
	if err != nil {
		return fmt.Errorf("PING: %w", err)
	}
	if pong != "PONG" {
		return fmt.Errorf("PING: got %q, want PONG", pong)
	}
	info, err := rc.do("INFO", "server")
	if err != nil {
		return fmt.Errorf("INFO server: %w", err)
	}
	if got := infoField(info, "process_id"); got != pid {
		return fmt.Errorf("%w: %s answers with process_id %q, want %s", errExited, addr, got, pid)
	}
	return nil
}

// freePort returns a loopback TCP port that was free a moment ago. For a
// cluster node, port+10000 (the cluster bus) must be free as well.
func freePort(cluster bool) (int, error) {
	for i := 0; i < 100; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		if !cluster {
			l.Close()
			return port, nil
		}
		ok := false
		if port+10000 <= 65535 {
			if bl, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+10000))); err == nil {
				bl.Close()
				ok = true
			}
		}
		l.Close()
		if ok {
			return port, nil
		}
	}
	return 0, errors.New("redistest: no port p with p and p+10000 both free")
}
