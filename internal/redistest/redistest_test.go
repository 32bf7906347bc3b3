package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fakeTB records Skip and Fatal instead of stopping the goroutine.
type fakeTB struct {
	testing.TB
	skipped, failed bool
	msg             string
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Skipf(format string, args ...any) {
	f.skipped, f.msg = true, fmt.Sprintf(format, args...)
}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failed, f.msg = true, fmt.Sprintf(format, args...)
}

func TestRequireWithoutRedis(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	if Available() {
		t.Fatal("Available() = true with an empty PATH, want false")
	}
	tests := []struct {
		name        string
		env         string
		wantSkipped bool
		wantFailed  bool
	}{
		{name: "skip by default", env: "", wantSkipped: true},
		{name: "fail when required", env: "1", wantFailed: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(RequireEnv, tc.env)
			f := &fakeTB{TB: t}
			Require(f)
			if f.skipped != tc.wantSkipped || f.failed != tc.wantFailed {
				t.Fatalf("skipped=%v failed=%v (%q), want skipped=%v failed=%v",
					f.skipped, f.failed, f.msg, tc.wantSkipped, tc.wantFailed)
			}
			if !strings.Contains(f.msg, "redis-server") || !strings.Contains(f.msg, RequireEnv) {
				t.Errorf("message %q does not name redis-server and %s", f.msg, RequireEnv)
			}
		})
	}
}

func TestStart(t *testing.T) {
	s := Start(t, Options{})
	if !strings.HasPrefix(s.Addr(), "127.0.0.1:") || strings.HasSuffix(s.Addr(), ":6379") {
		t.Fatalf("Addr() = %q, want a private 127.0.0.1 port", s.Addr())
	}
	opt, err := redis.ParseURL(s.URL())
	if err != nil || opt.Addr != s.Addr() || opt.DB != 0 {
		t.Fatalf("ParseURL(%q) = %+v, %v; want Addr %s DB 0", s.URL(), opt, err, s.Addr())
	}
	ctx := t.Context()
	c := s.Client(t)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING: %v", err)
	}
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	if got, err := c.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("GET k = %q, %v; want \"v\"", got, err)
	}
	if !strings.Contains(s.Log(), "Ready to accept connections") {
		t.Errorf("Log() lacks the ready line:\n%s", s.Log())
	}
}

func TestKillRestartAppendOnly(t *testing.T) {
	s := Start(t, Options{AppendOnly: true})
	addr := s.Addr()
	ctx := t.Context()
	c := s.Client(t)
	if err := c.Set(ctx, "kept", "1", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}

	s.Kill(t)
	s.Kill(t) // no-op when not running
	if conn, err := net.Dial("tcp", addr); err == nil {
		conn.Close()
		t.Fatalf("dial %s after Kill succeeded, want connection refused", addr)
	}
	s.Restart(t)
	if s.Addr() != addr {
		t.Fatalf("Addr() after Restart = %s, want %s", s.Addr(), addr)
	}
	if got, err := c.Get(ctx, "kept").Result(); err != nil || got != "1" {
		t.Fatalf("GET kept after Kill+Restart = %q, %v; want \"1\"", got, err)
	}

	// Restart of a running server stops it gracefully first.
	if err := c.Set(ctx, "kept2", "2", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	s.Restart(t)
	if got, err := c.Get(ctx, "kept2").Result(); err != nil || got != "2" {
		t.Fatalf("GET kept2 after Restart = %q, %v; want \"2\"", got, err)
	}
}

func TestStopWithoutPersistenceLosesData(t *testing.T) {
	s := Start(t, Options{})
	ctx := t.Context()
	c := s.Client(t)
	if err := c.Set(ctx, "gone", "1", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	s.Stop(t)
	s.Stop(t) // no-op when not running
	s.Restart(t)
	if err := c.Get(ctx, "gone").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET gone after Stop+Restart without AOF: err = %v, want redis.Nil", err)
	}
}

func TestPauseResume(t *testing.T) {
	s := Start(t, Options{})
	c := s.Client(t)
	if err := c.Ping(t.Context()).Err(); err != nil {
		t.Fatalf("PING: %v", err)
	}

	s.Pause(t)
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	err := c.Ping(ctx).Err()
	cancel()
	if err == nil {
		t.Fatal("PING while paused succeeded, want a timeout")
	}

	s.Resume(t)
	ctx, cancel = context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after Resume: %v", err)
	}
}

func TestStopPaused(t *testing.T) {
	s := Start(t, Options{AppendOnly: true})
	s.Pause(t)
	s.Stop(t) // must resume before SIGTERM, or it would hang
	s.Restart(t)
	if err := s.Client(t).Ping(t.Context()).Err(); err != nil {
		t.Fatalf("PING after Pause+Stop+Restart: %v", err)
	}
}

func TestProxy(t *testing.T) {
	s := Start(t, Options{})
	p := NewProxy(t, s.Addr())
	ctx := t.Context()
	opt := s.ClientOptions()
	opt.Addr = p.Addr()
	c := redis.NewClient(opt)
	defer c.Close()

	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET through proxy: %v", err)
	}
	if got := p.Conns(); got < 1 {
		t.Fatalf("Conns() = %d after a command, want >= 1", got)
	}

	p.CutAll()
	if got := p.Conns(); got != 0 {
		t.Fatalf("Conns() = %d right after CutAll, want 0", got)
	}
	// go-redis notices the dead pooled connection and dials again.
	if got, err := c.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("GET after CutAll = %q, %v; want \"v\"", got, err)
	}
	if got := p.Conns(); got < 1 {
		t.Fatalf("Conns() = %d after reconnecting, want >= 1", got)
	}

	// The proxy really closes the client side: a raw connection sees EOF.
	raw, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatalf("dial proxy: %v", err)
	}
	defer raw.Close()
	if _, err := raw.Write([]byte("PING\r\n")); err != nil {
		t.Fatalf("write: %v", err)
	}
	buf := make([]byte, 64)
	raw.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := raw.Read(buf); err != nil || string(buf[:n]) != "+PONG\r\n" {
		t.Fatalf("raw PING = %q, %v; want +PONG", buf[:n], err)
	}
	p.CutAll()
	if n, err := raw.Read(buf); err == nil {
		t.Fatalf("read after CutAll = %q, want an error", buf[:n])
	}

	p.SetRefuse(true)
	p.CutAll()
	refused := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1})
	defer refused.Close()
	if err := refused.Ping(ctx).Err(); err == nil {
		t.Fatal("PING while refusing succeeded, want an error")
	}
	if got := p.Conns(); got != 0 {
		t.Fatalf("Conns() = %d while refusing, want 0", got)
	}

	p.SetRefuse(false)
	if err := refused.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after SetRefuse(false): %v", err)
	}

	p.Close()
	p.Close() // idempotent
	if err := refused.Ping(ctx).Err(); err == nil {
		t.Fatal("PING through a closed proxy succeeded, want an error")
	}
}

func TestCluster(t *testing.T) {
	c := StartCluster(t, 3)
	if got := len(c.Addrs()); got != 3 {
		t.Fatalf("len(Addrs()) = %d, want 3", got)
	}
	ctx := t.Context()
	cc := c.Client(t)

	slots := map[int64]bool{}
	for i := range 12 {
		key := fmt.Sprintf("key-%d", i)
		if err := cc.Set(ctx, key, i, 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", key, err)
		}
		slot, err := cc.ClusterKeySlot(ctx, key).Result()
		if err != nil {
			t.Fatalf("CLUSTER KEYSLOT %s: %v", key, err)
		}
		slots[slot] = true
	}
	if len(slots) < 2 {
		t.Fatalf("keys landed in %d slots, want several", len(slots))
	}
	for i := range 12 {
		key := fmt.Sprintf("key-%d", i)
		if got, err := cc.Get(ctx, key).Int(); err != nil || got != i {
			t.Fatalf("GET %s = %d, %v; want %d", key, got, err, i)
		}
	}

	err := cc.ForEachShard(ctx, func(ctx context.Context, n *redis.Client) error {
		info, err := n.ClusterInfo(ctx).Result()
		if err != nil {
			return err
		}
		if !strings.Contains(info, "cluster_state:ok") {
			return fmt.Errorf("%s: CLUSTER INFO lacks cluster_state:ok:\n%s", n.Options().Addr, info)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range c.Nodes() {
		if n.Log() == "" {
			t.Errorf("node %s has an empty log", n.Addr())
		}
	}
}

func TestRestartRetriesBusyPort(t *testing.T) {
	s := Start(t, Options{})
	s.Kill(t)
	// Hold the port briefly, as a lingering socket or a racing process might.
	ln, err := net.Listen("tcp", s.Addr())
	if err != nil {
		t.Fatalf("listen on %s: %v", s.Addr(), err)
	}
	released := make(chan struct{})
	go func() {
		defer close(released)
		time.Sleep(300 * time.Millisecond)
		ln.Close()
	}()
	s.Restart(t)
	<-released
	if err := s.Client(t).Ping(t.Context()).Err(); err != nil {
		t.Fatalf("PING after Restart on a briefly busy port: %v", err)
	}
	if !strings.Contains(s.Log(), "Address already in use") {
		t.Logf("log shows no bind failure; the port was released before redis-server tried:\n%s", s.Log())
	}
}

func TestProxyBlackHole(t *testing.T) {
	s := Start(t, Options{})
	p := NewProxy(t, s.Addr())
	raw, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatalf("dial proxy: %v", err)
	}
	defer raw.Close()
	buf := make([]byte, 64)
	ping := func(wait time.Duration) (string, error) {
		if _, err := raw.Write([]byte("PING\r\n")); err != nil {
			return "", err
		}
		raw.SetReadDeadline(time.Now().Add(wait))
		n, err := raw.Read(buf)
		return string(buf[:n]), err
	}
	if got, err := ping(5 * time.Second); err != nil || got != "+PONG\r\n" {
		t.Fatalf("PING = %q, %v; want +PONG", got, err)
	}

	p.BlackHole()
	// The write succeeds and the socket stays open; no answer comes.
	got, err := ping(300 * time.Millisecond)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("PING while black-holed = %q, %v; want a read timeout (socket open, no answer)", got, err)
	}
	if n := p.Conns(); n != 1 {
		t.Fatalf("Conns() = %d while black-holed, want 1 (kept open)", n)
	}
	// A go-redis client with default options waits out its ReadTimeout.
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), ReadTimeout: 200 * time.Millisecond, MaxRetries: -1})
	defer c.Close()
	if err := c.Ping(t.Context()).Err(); err == nil {
		t.Fatal("go-redis PING while black-holed succeeded, want a timeout")
	}

	p.Restore()
	if n, err := raw.Read(buf); err == nil {
		t.Fatalf("read on a connection that lived through the black hole = %q, want it cut", buf[:n])
	}
	if err := c.Ping(t.Context()).Err(); err != nil {
		t.Fatalf("PING after Restore: %v", err)
	}
}

// TestProxyHoldNext: a held command is not run while held, its client times
// out and closes, and Release delivers it to the server, which runs it.
func TestProxyHoldNext(t *testing.T) {
	s := Start(t, Options{})
	p := NewProxy(t, s.Addr())
	ctx := t.Context()
	opt := s.ClientOptions()
	opt.Addr = p.Addr()
	opt.ReadTimeout = 300 * time.Millisecond
	opt.MaxRetries = -1
	c := redis.NewClient(opt)
	defer c.Close()
	direct := s.Client(t)

	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	p.HoldNext(func(b []byte) bool { return strings.Contains(string(b), "late") })
	if err := c.Set(ctx, "k", "late", 0).Err(); err == nil {
		t.Fatal("SET on a held connection succeeded, want a timeout")
	}
	if n, err := direct.Exists(ctx, "k").Result(); err != nil || n != 0 {
		t.Fatalf("EXISTS k while held = %d, %v; want 0", n, err)
	}
	// Other and new connections are not held.
	if err := c.Set(ctx, "other", "v", 0).Err(); err != nil {
		t.Fatalf("SET after the hold: %v", err)
	}
	if got := p.Release(); got != 1 {
		t.Fatalf("Release() = %d, want 1", got)
	}
	if v, err := direct.Get(ctx, "k").Result(); err != nil || v != "late" {
		t.Fatalf("GET k after Release = %q, %v; want the late SET to have run", v, err)
	}
}

// TestClusterPartialCoverage: on a Cluster started with PartialCoverage, a
// master paused past the node timeout is deemed failed by the others
// (CLUSTER NODES: "fail"), and the other masters go on serving their slots
// (cluster_state:ok, a SET answered); once resumed, the paused master
// serves its own slots again.
func TestClusterPartialCoverage(t *testing.T) {
	c := StartClusterWith(t, ClusterOptions{Masters: 3, PartialCoverage: true})
	ctx := t.Context()
	cc := c.Client(t)
	nodes := c.Nodes()
	paused, healthy := nodes[0], nodes[1]
	keyOn := func(addr string) string {
		for i := 0; ; i++ {
			key := fmt.Sprint("pc-", i)
			m, err := cc.MasterForKey(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if m.Options().Addr == addr {
				return key
			}
		}
	}
	kPaused, kHealthy := keyOn(paused.Addr()), keyOn(healthy.Addr())
	// A command before the pause: a new ClusterClient's first command
	// loads the command table (COMMAND) from a node picked at random,
	// which, the paused one, would hold it for the ReadTimeout (5s; seen
	// in CI: "SET pc-1 on a healthy master took 5.01s").
	if err := cc.Set(ctx, kHealthy, "w", 0).Err(); err != nil {
		t.Fatal(err)
	}
	pausedID, err := paused.Client(t).Do(ctx, "CLUSTER", "MYID").Text()
	if err != nil {
		t.Fatal(err)
	}

	paused.Pause(t)
	resumed := false
	t.Cleanup(func() {
		if !resumed {
			paused.Resume(t)
		}
	})
	pausedAt := time.Now()
	hc := healthy.Client(t)
	if _, _, err := RetryUntil(ClusterNodeTimeout+10*time.Second, func() error {
		nodes, err := hc.ClusterNodes(ctx).Result()
		if err != nil {
			return err
		}
		for _, l := range strings.Split(nodes, "\n") {
			if f := strings.Fields(l); len(f) > 2 && f[0] == pausedID {
				if slices.Contains(strings.Split(f[2], ","), "fail") {
					return nil
				}
				return fmt.Errorf("flags of the paused node: %s", f[2])
			}
		}
		return fmt.Errorf("paused node %s not in CLUSTER NODES:\n%s", pausedID, nodes)
	}); err != nil {
		t.Fatalf("the paused master was not deemed failed: %v", err)
	}
	failedAt := time.Now()
	info, err := hc.ClusterInfo(ctx).Result()
	if err != nil || !strings.Contains(info, "cluster_state:ok") {
		t.Errorf("CLUSTER INFO on a healthy master with a failed one: %v\n%s", err, info)
	}
	s0 := time.Now()
	if err := cc.Set(ctx, kHealthy, "x", 0).Err(); err != nil {
		t.Errorf("SET %s on a healthy master with a failed one: %v", kHealthy, err)
	}
	setTook := time.Since(s0)
	if setTook > time.Second {
		t.Errorf("SET %s on a healthy master took %v", kHealthy, setTook)
	}

	paused.Resume(t)
	resumed = true
	resumedAt := time.Now()
	if _, _, err := RetryUntil(ReadyTimeout+ClusterNodeTimeout, func() error {
		return cc.Set(ctx, kPaused, "y", 0).Err()
	}); err != nil {
		t.Errorf("SET %s on the resumed master: %v", kPaused, err)
	}
	t.Logf("the paused master deemed failed %v after the pause; SET on a healthy master then took %v; SET on the resumed master ok %v after the resume",
		failedAt.Sub(pausedAt).Round(time.Millisecond), setTook.Round(time.Millisecond), time.Since(resumedAt).Round(time.Millisecond))
}
