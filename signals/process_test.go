package signals_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
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
// their agent runs in Redis; the parent checks it. Every wait of the parent
// is bounded, and a worker that exits early fails the wait that needed it.
// A worker exits when its stdin closes, so none outlives the test binary.

const procTTL = 2 * time.Second

// fenceScript is the fenced test resource and the run log in one step: it
// accepts the start of a signal on thread KEYS[1] only with a token not below
// the highest seen (ARGV[1]), appends the log entry ARGV[2] with the verdict
// to KEYS[2] and counts accepted starts in KEYS[3]. ARGV[2] empty: a fenced
// write only (the end of a signal), nothing logged or counted.
var fenceScript = redis.NewScript(`
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
local tok = tonumber(ARGV[1])
local ok = tok >= cur
if ok then redis.call('SET', KEYS[1], ARGV[1]) end
if ARGV[2] ~= '' then
  redis.call('RPUSH', KEYS[2], ARGV[2] .. '|' .. tostring(ok))
  if ok then redis.call('INCR', KEYS[3]) end
end
if ok then return 1 end
return 0`)

// workerCfg is passed to a worker through environment variables.
type workerCfg struct {
	ID     string
	Inc    string        // incarnation suffix of the log's process name (a restarted worker)
	Mode   string        // serve, send, send-exit, soak
	Thread string        // send modes
	Sigs   []string      // signal IDs to send, in order
	Delay  time.Duration // per signal in the agent
	NoNext bool          // the agent does not call Next
	Stuck  time.Duration // the agent sleeps this long ignoring ctx, then reports
	GoKey  string        // wait for this Redis key before sending
	Via    string        // the runtime's Redis address (a proxy), by NewURL with default options; records still go straight to W_URL
	Test   string        // the worker's test function; default TestWorkerProcess
	// Recovery is the runtime's recovery interval; default 200ms.
	Recovery time.Duration
}

func (c workerCfg) env(url string) []string {
	return append(os.Environ(),
		workerEnv+"="+c.Mode, "W_URL="+url, "W_ID="+c.ID, "W_INC="+c.Inc, "W_THREAD="+c.Thread,
		"W_SIGS="+strings.Join(c.Sigs, ","), "W_DELAY="+c.Delay.String(),
		"W_NONEXT="+strconv.FormatBool(c.NoNext), "W_STUCK="+c.Stuck.String(), "W_GO="+c.GoKey, "W_VIA="+c.Via,
		"W_RECOVERY="+c.Recovery.String())
}

type worker struct {
	name  string
	cmd   *exec.Cmd
	stdin io.WriteCloser // held open: the worker exits when it closes
	done  chan struct{}  // closed once the process exited and its output was read

	mu      sync.Mutex
	lines   []string      // "W " lines not taken by expect yet; never bounded, never blocks the reader
	more    chan struct{} // closed and replaced on each new line
	waitErr error         // the exit status, once done is closed
}

func startWorker(t *testing.T, url string, c workerCfg) *worker {
	t.Helper()
	test := c.Test
	if test == "" {
		test = "TestWorkerProcess"
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.count=1", "-test.timeout=10m")
	cmd.Env = c.env(url)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w := &worker{name: c.ID + c.Inc, cmd: cmd, stdin: in, done: make(chan struct{}), more: make(chan struct{})}
	go func() {
		defer close(w.done)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			if l, ok := strings.CutPrefix(sc.Text(), "W "); ok {
				w.mu.Lock()
				w.lines = append(w.lines, l)
				close(w.more)
				w.more = make(chan struct{})
				w.mu.Unlock()
			}
		}
		_, _ = io.Copy(io.Discard, out) // never leave the worker blocked on a full pipe
		err := cmd.Wait()
		w.mu.Lock()
		w.waitErr = err
		w.mu.Unlock()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = in.Close()
		select {
		case <-w.done:
		case <-time.After(10 * time.Second):
			t.Errorf("worker %s: not gone 10s after SIGKILL", w.name)
		}
	})
	return w
}

// exited reports whether the worker process is gone, and how it ended.
func (w *worker) exited() (bool, error) {
	select {
	case <-w.done:
		w.mu.Lock()
		defer w.mu.Unlock()
		return true, w.waitErr
	default:
		return false, nil
	}
}

// wait waits for the worker process to exit.
func (w *worker) wait(t *testing.T, timeout time.Duration) {
	t.Helper()
	select {
	case <-w.done:
	case <-time.After(timeout):
		t.Fatalf("worker %s: still running %v after it should have exited", w.name, timeout)
	}
}

// expect waits for a line starting with prefix, takes it and returns it. It
// fails the test when the worker exits first or timeout passes.
func (w *worker) expect(t *testing.T, prefix string, timeout time.Duration) string {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		w.mu.Lock()
		for i, l := range w.lines {
			if strings.HasPrefix(l, prefix) {
				w.lines = append(w.lines[:i:i], w.lines[i+1:]...)
				w.mu.Unlock()
				return l
			}
		}
		more, other := w.more, w.tail()
		w.mu.Unlock()
		if gone, err := w.exited(); gone {
			// The reader closes done only after the last line was added.
			w.mu.Lock()
			found := slices.ContainsFunc(w.lines, func(l string) bool { return strings.HasPrefix(l, prefix) })
			w.mu.Unlock()
			if !found {
				t.Fatalf("worker %s exited (%v) without a %q line; last lines: %q", w.name, err, prefix, other)
			}
			continue
		}
		select {
		case <-more:
		case <-w.done:
		case <-deadline.C:
			t.Fatalf("worker %s: no %q line within %v; last lines: %q", w.name, prefix, timeout, other)
		}
	}
}

// tail returns the last few untaken lines; w.mu must be held.
func (w *worker) tail() []string {
	return slices.Clone(w.lines[max(0, len(w.lines)-20):])
}

func (w *worker) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := w.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}

// logEntry is one signal start, as a worker's agent records it in
// "log:<thread>" through fenceScript.
type logEntry struct {
	ID, Proc    string
	Token       uint64
	Redelivered bool
	FenceOK     bool // false: refused by the fence (a stale owner's attempt; not a run)
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
		if len(f) != 5 {
			t.Fatalf("thread %s: malformed log entry %q", thread, r)
		}
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

// distinct counts the signals of l that ran (their start passed the fence).
func distinct(l []logEntry) int {
	m := map[string]bool{}
	for _, e := range l {
		if e.FenceOK {
			m[e.ID] = true
		}
	}
	return len(m)
}

// fence runs fenceScript for thread with token; entry "" is a fenced write
// that logs nothing.
func fence(ctx context.Context, c redis.Scripter, thread string, token uint64, entry string) (bool, error) {
	ok, err := fenceScript.Run(ctx, c, []string{"fence:" + thread, "log:" + thread, "runs"}, token, entry).Int()
	return ok == 1, err
}

// TestWorkerProcess is the body of a worker process; it is skipped unless
// the test binary was started as a worker.
func TestWorkerProcess(t *testing.T) {
	mode := os.Getenv(workerEnv)
	if mode == "" {
		t.Skip("only runs as a worker process of the multi-process tests")
	}
	// The parent holds our stdin open: when it is gone, so are we.
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(3)
	}()
	ctx := context.Background()
	id := os.Getenv("W_ID")
	name := id + os.Getenv("W_INC") // this incarnation, in the log
	// NewURL with default options, as users build it: go-redis's default
	// pool (an active thread holds no connection), and the smallest
	// retention on every topic (1): a trim must never remove what a group
	// has not acked.
	opts := redisstreams.Options{Retention: 1}
	b, err := redisstreams.NewURL(ctx, os.Getenv("W_URL"), opts)
	if err != nil {
		t.Fatal(err)
	}
	c := b.Client()
	if via := os.Getenv("W_VIA"); via != "" {
		// The runtime reaches Redis through the parent's proxy, on a
		// client built as users build it; the fenced records (c) do not.
		if b, err = redisstreams.NewURL(ctx, "redis://"+via+"/0", opts); err != nil {
			t.Fatal(err)
		}
	}
	delay, _ := time.ParseDuration(os.Getenv("W_DELAY"))
	stuck, _ := time.ParseDuration(os.Getenv("W_STUCK"))
	noNext := os.Getenv("W_NONEXT") == "true"
	recovery, _ := time.ParseDuration(os.Getenv("W_RECOVERY"))
	if recovery <= 0 {
		recovery = 200 * time.Millisecond
	}
	bg := context.Background()
	take := func(ctx context.Context, run *signals.Run, s signals.Signal) {
		// The start of a signal: a fenced write that logs who started it
		// with which token. A refusal while the run's ctx is live means two
		// runs of the thread at once.
		ok, err := fence(bg, c, run.Thread, run.Token, fmt.Sprintf("%s|%s|%d|%t", s.ID, name, run.Token, s.Redelivered))
		if err != nil {
			fmt.Println("W redis error", err)
		}
		if !ok && ctx.Err() == nil {
			c.Incr(bg, "violations")
		}
		fmt.Printf("W ran %s %s\n", run.Thread, s.ID)
		fmt.Printf("W started %s %s %d %d\n", run.Thread, s.ID, run.Token, time.Now().UnixNano())
		if stuck > 0 {
			time.Sleep(stuck) // ignores ctx, like a stuck agent
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			fenced := 0
			if ok, _ := fence(bg, c, run.Thread, run.Token, ""); ok {
				fenced = 1
			}
			c.Set(bg, "late:"+run.Thread, fmt.Sprintf("ctxdone=%t fence=%d", ctx.Err() != nil, fenced), 0)
			return
		}
		if delay > 0 {
			select {
			case <-time.After(delay):
			case <-ctx.Done():
				// A fenced write right at the cancel: accepted unless a
				// newer run of the thread started already.
				at := time.Now().UnixNano()
				ok, _ := fence(bg, c, run.Thread, run.Token, "")
				fmt.Printf("W cancelled %s %s %d %d fence=%t\n", run.Thread, s.ID, run.Token, at, ok)
			}
		}
		// The end of the signal: fenced again, so that a run overlapping
		// this one (a newer token started meanwhile) is caught.
		if ok, _ := fence(bg, c, run.Thread, run.Token, ""); !ok && ctx.Err() == nil {
			c.Incr(bg, "violations")
		}
	}
	agent := func(ctx context.Context, run *signals.Run) error {
		last := ""
		for _, s := range run.Signals {
			take(ctx, run, s)
			last = s.ID
		}
		for !noNext {
			s, ok := run.Next(ctx)
			if !ok {
				break
			}
			// Next returned a signal, so the runtime has recorded the one
			// before as done (and acked it): it must never run again. Keyed
			// by the tenure (token) too: a later tenure of this process
			// that got past a redelivery of it says nothing of this one.
			c.HSet(bg, "fin:"+run.Thread, fmt.Sprintf("%s/%s/%d", last, name, run.Token), 1)
			take(ctx, run, s)
			last = s.ID
		}
		return nil
	}
	ropts := []signals.Option{signals.WithProcessID(name), signals.WithLeaseTTL(procTTL),
		signals.WithRecoveryInterval(recovery), signals.WithLinger(100 * time.Millisecond)}
	if mode == "soak" {
		// A tenure that lost its lease (this process stalled past its
		// TTL: fail-closed) may see its signal redelivered, even to this
		// process: the soak's check allows that only for a tenure
		// recorded here.
		ropts = append(ropts, signals.WithObserver(func(e signals.Event) {
			if e.Kind == signals.LeaseLost {
				c.HSet(bg, "lost:"+e.Thread, fmt.Sprintf("%s/%d", name, e.Token), 1)
			}
		}))
	}
	rt, err := signals.New(b, agent, ropts...)
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
	case "backlog":
		// backlogThreads threads, each with one running signal and
		// backlogPer queued behind it.
		for th := range backlogThreads {
			for i := range backlogPer + 1 {
				thread := fmt.Sprint("busy", th)
				if _, err := rt.Send(ctx, thread, signals.Signal{ID: fmt.Sprintf("%s-%02d", thread, i), Type: "msg"}); err != nil {
					t.Fatal(err)
				}
			}
		}
		fmt.Println("W backlog-sent")
	case "closer":
		// closerThreads threads, each with one running signal and
		// closerQueued queued behind it; SIGTERM closes the runtime.
		term := make(chan os.Signal, 1)
		signal.Notify(term, syscall.SIGTERM)
		for i := range closerQueued + 1 {
			for th := range closerThreads {
				thread := fmt.Sprint("close", th)
				if _, err := rt.Send(ctx, thread, signals.Signal{ID: fmt.Sprintf("%s-%d", thread, i), Type: "msg"}); err != nil {
					t.Fatal(err)
				}
			}
		}
		fmt.Println("W sent-all")
		<-term
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		err := rt.Close(cctx)
		cancel()
		fmt.Printf("W closed %d err=%v\n", time.Now().UnixNano(), err)
		os.Exit(0)
	}
	select {} // serve until killed
}
