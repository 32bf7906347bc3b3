package signals_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

// Multi-process tests: the test binary re-executes itself as worker
// processes (TestWorkerProcess, selected by the LEASEBUS_SIGNALS_WORKER
// environment variable), all on one private redis-server. Workers record what
// their agent runs in Redis; the parent checks it.

const procTTL = 2 * time.Second

// fenceScript accepts a write to KEYS[1] only with a token not below the
// highest seen: the fenced test resource.
var fenceScript = redis.NewScript(`
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
local tok = tonumber(ARGV[1])
if tok < cur then return 0 end
redis.call('SET', KEYS[1], ARGV[1])
return 1`)

// workerCfg is passed to a worker through environment variables.
type workerCfg struct {
	ID     string
	Mode   string        // serve, send, send-exit, soak
	Thread string        // send modes
	Sigs   []string      // signal IDs to send, in order
	Delay  time.Duration // per signal in the agent
	NoNext bool          // the agent does not call Next
	Stuck  time.Duration // the agent sleeps this long ignoring ctx, then reports
	GoKey  string        // wait for this Redis key before sending
}

func (c workerCfg) env(url string) []string {
	return append(os.Environ(),
		workerEnv+"="+c.Mode, "W_URL="+url, "W_ID="+c.ID, "W_THREAD="+c.Thread,
		"W_SIGS="+strings.Join(c.Sigs, ","), "W_DELAY="+c.Delay.String(),
		"W_NONEXT="+strconv.FormatBool(c.NoNext), "W_STUCK="+c.Stuck.String(), "W_GO="+c.GoKey)
}

type worker struct {
	cmd     *exec.Cmd
	lines   chan string
	done    chan struct{}
	backlog []string
}

func startWorker(t *testing.T, url string, c workerCfg) *worker {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestWorkerProcess$", "-test.count=1")
	cmd.Env = c.env(url)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w := &worker{cmd: cmd, lines: make(chan string, 1000), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if l := sc.Text(); strings.HasPrefix(l, "W ") {
				w.lines <- strings.TrimPrefix(l, "W ")
			}
		}
		_ = cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		<-w.done
	})
	return w
}

// expect waits for a line starting with prefix and returns it.
func (w *worker) expect(t *testing.T, prefix string, timeout time.Duration) string {
	t.Helper()
	for i, l := range w.backlog {
		if strings.HasPrefix(l, prefix) {
			w.backlog = append(w.backlog[:i:i], w.backlog[i+1:]...)
			return l
		}
	}
	deadline := time.After(timeout)
	for {
		select {
		case l := <-w.lines:
			if strings.HasPrefix(l, prefix) {
				return l
			}
			w.backlog = append(w.backlog, l)
		case <-deadline:
			t.Fatalf("worker: no %q line within %v; other lines: %q", prefix, timeout, w.backlog)
		}
	}
}

func (w *worker) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := w.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}

// logEntry is one signal run, as a worker's agent records it in "log:<thread>".
type logEntry struct {
	ID, Proc    string
	Token       uint64
	Redelivered bool
	FenceOK     bool
}

func readLog(t *testing.T, c *redis.Client, thread string) []logEntry {
	t.Helper()
	raw, err := c.LRange(context.Background(), "log:"+thread, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	var out []logEntry
	for _, r := range raw {
		f := strings.Split(r, "|")
		tok, _ := strconv.ParseUint(f[2], 10, 64)
		out = append(out, logEntry{ID: f[0], Proc: f[1], Token: tok, Redelivered: f[3] == "true", FenceOK: f[4] == "true"})
	}
	return out
}

func waitLog(t *testing.T, c *redis.Client, thread string, n int, timeout time.Duration) []logEntry {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		l := readLog(t, c, thread)
		if distinct(l) >= n {
			return l
		}
		if time.Now().After(deadline) {
			t.Fatalf("thread %s: %d distinct signals run within %v, want %d: %+v", thread, distinct(l), timeout, n, l)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func distinct(l []logEntry) int {
	m := map[string]bool{}
	for _, e := range l {
		m[e.ID] = true
	}
	return len(m)
}

// TestWorkerProcess is the body of a worker process; it is skipped unless
// the test binary was started as a worker.
func TestWorkerProcess(t *testing.T) {
	mode := os.Getenv(workerEnv)
	if mode == "" {
		t.Skip("only runs as a worker process of the multi-process tests")
	}
	ctx := context.Background()
	id := os.Getenv("W_ID")
	b, err := redisstreams.NewURL(ctx, os.Getenv("W_URL")+"?pool_size=2000", redisstreams.Options{BlockTime: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	c := b.Client()
	delay, _ := time.ParseDuration(os.Getenv("W_DELAY"))
	stuck, _ := time.ParseDuration(os.Getenv("W_STUCK"))
	noNext := os.Getenv("W_NONEXT") == "true"
	take := func(ctx context.Context, run *signals.Run, s signals.Signal) {
		ok, err := fenceScript.Run(ctx, c, []string{"fence:" + run.Thread}, run.Token).Int()
		fenceOK := err == nil && ok == 1
		if !fenceOK && ctx.Err() == nil {
			c.Incr(context.Background(), "violations")
		}
		c.RPush(context.Background(), "log:"+run.Thread, fmt.Sprintf("%s|%s|%d|%t|%t", s.ID, id, run.Token, s.Redelivered, fenceOK))
		fmt.Printf("W ran %s %s\n", run.Thread, s.ID)
		if stuck > 0 {
			time.Sleep(stuck) // ignores ctx, like a stuck agent
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			ok, _ := fenceScript.Run(context.Background(), c, []string{"fence:" + run.Thread}, run.Token).Int()
			c.Set(context.Background(), "late:"+run.Thread, fmt.Sprintf("ctxdone=%t fence=%d", ctx.Err() != nil, ok), 0)
			return
		}
		if delay > 0 {
			select {
			case <-time.After(delay):
			case <-ctx.Done():
			}
		}
	}
	agent := func(ctx context.Context, run *signals.Run) error {
		for _, s := range run.Signals {
			take(ctx, run, s)
		}
		for !noNext {
			s, ok := run.Next(ctx)
			if !ok {
				break
			}
			take(ctx, run, s)
		}
		return nil
	}
	rt, err := signals.New(b, agent, signals.WithProcessID(id), signals.WithLeaseTTL(procTTL),
		signals.WithRecoveryInterval(200*time.Millisecond), signals.WithLinger(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("W ready")
	if g := os.Getenv("W_GO"); g != "" {
		for c.Exists(ctx, g).Val() == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	switch mode {
	case "send", "send-exit":
		for _, s := range strings.Split(os.Getenv("W_SIGS"), ",") {
			acc, err := rt.Send(ctx, os.Getenv("W_THREAD"), signals.Signal{ID: s, Type: "msg"})
			if err != nil {
				t.Fatal(err)
			}
			fmt.Printf("W sent %s %v %s\n", s, acc.Action, acc.Owner)
		}
		if mode == "send-exit" {
			os.Exit(0) // no Close: the process is gone right after Send returned
		}
	case "soak":
		soakSend(t, rt, c, id)
	}
	select {} // serve until killed
}
