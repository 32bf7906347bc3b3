package signals_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

// pacedWorkerEnv selects, in TestMain, the worker process of
// BenchmarkForwardedAtHalfRateProcesses (its value is the worker's index).
const pacedWorkerEnv = "LEASEBUS_PACED_WORKER"

const (
	pacedThreads  = 1000
	pacedRuntimes = 3
)

// pacedSender is the runtime that sends signal k of a phase (to thread
// k%pacedThreads, owned by runtime thread%pacedRuntimes): the next one, so
// that every Send is Forwarded.
func pacedSender(k int) int { return (k%pacedThreads + 1) % pacedRuntimes }

// BenchmarkForwardedAtHalfRateProcesses is BenchmarkForwardedAtHalfRate as
// the runtime is deployed: each of the 3 runtimes in its own OS process (the
// test binary re-executed), so that each has its own heap and garbage
// collector, instead of all three sharing one. Same shape: 1,000 threads,
// thread i owned by runtime i%3 through a run that stays active; phase 1
// sends b.N signals from the runtime after each thread's owner with 48
// concurrent senders (16 per process) and measures the maximum rate (first
// Send → last signal taken); phase 2 sends b.N more on one schedule shared by
// the processes, open loop, at half that rate. fwd-p50-ms and fwd-p99-ms are
// Send start (in the sending process) → agent given the signal (in the
// owning process), both read from the machine's wall clock.
func BenchmarkForwardedAtHalfRateProcesses(b *testing.B) {
	srv := benchStart(b)
	ws := make([]*pacedWorker, pacedRuntimes)
	for i := range ws {
		ws[i] = startPacedWorker(b, srv.URL(), i)
	}
	all := func(cmd, want string) {
		for _, w := range ws {
			w.send(b, cmd)
		}
		for _, w := range ws {
			w.expect(b, want, time.Minute)
		}
	}
	for _, w := range ws {
		w.expect(b, "ready", time.Minute)
	}
	all("seed", "seeded")

	b.ResetTimer()
	start := time.Now()
	all(fmt.Sprintf("burst %d 16", b.N), "sent")
	last := pacedWaitTaken(b, ws, 0, b.N)
	maxRate := float64(b.N) / time.Unix(0, last).Sub(start).Seconds()

	interval := time.Duration(float64(time.Second) / (maxRate / 2))
	at := time.Now().Add(50 * time.Millisecond)
	all(fmt.Sprintf("paced %d %d %d", b.N, at.UnixNano(), int64(interval)), "sent")
	last = pacedWaitTaken(b, ws, 1, b.N)
	paced := float64(b.N) / time.Unix(0, last).Sub(at).Seconds()
	b.StopTimer()

	sent := make([]int64, b.N)
	arrived := make([]int64, b.N)
	for _, w := range ws {
		w.send(b, "dump")
		for {
			l := w.next(b, time.Minute)
			if l == "dumped" {
				break
			}
			f := strings.Fields(l)
			if len(f) != 3 || (f[0] != "snd" && f[0] != "arr") {
				b.Fatalf("worker %d: dump line %q", w.i, l)
			}
			k, err1 := strconv.Atoi(f[1])
			ns, err2 := strconv.ParseInt(f[2], 10, 64)
			if err1 != nil || err2 != nil || k < 0 || k >= b.N {
				b.Fatalf("worker %d: dump line %q", w.i, l)
			}
			if f[0] == "snd" {
				sent[k] = ns
			} else {
				arrived[k] = ns
			}
		}
	}
	lat := make([]time.Duration, 0, b.N)
	for k := range b.N {
		if sent[k] == 0 || arrived[k] == 0 {
			b.Fatalf("signal %d: sent at %d, arrived at %d: missing from the dumps", k, sent[k], arrived[k])
		}
		lat = append(lat, time.Duration(arrived[k]-sent[k]))
	}
	slices.Sort(lat)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(maxRate, "max-rate/s")
	b.ReportMetric(paced, "paced-rate/s")
	b.ReportMetric(ms(benchPercentile(lat, 0.50)), "fwd-p50-ms")
	b.ReportMetric(ms(benchPercentile(lat, 0.99)), "fwd-p99-ms")
	b.ReportMetric(ms(benchPercentile(lat, 1)), "fwd-max-ms")
}

// pacedWaitTaken waits until the workers' agents took n signals of phase p
// in all, and returns the latest time (Unix ns) one was taken.
func pacedWaitTaken(b *testing.B, ws []*pacedWorker, p, n int) int64 {
	b.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	for {
		total, last := 0, int64(0)
		for _, w := range ws {
			c, l := w.taken(p)
			total += c
			last = max(last, l)
		}
		if total >= n {
			return last
		}
		if time.Now().After(deadline) {
			b.Fatalf("phase %d: %d of %d signals taken within 5m", p, total, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// pacedWorker is the parent's end of one worker process.
type pacedWorker struct {
	i     int
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string   // its "W " lines other than "took"
	exit  chan struct{} // closed once its output ended

	mu   sync.Mutex
	took [2]struct {
		n    int
		last int64
	}
}

func startPacedWorker(b *testing.B, url string, i int) *pacedWorker {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), pacedWorkerEnv+"="+strconv.Itoa(i), "PW_URL="+url)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	w := &pacedWorker{i: i, cmd: cmd, stdin: in, lines: make(chan string, 1<<16), exit: make(chan struct{})}
	go func() {
		defer close(w.exit)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			l, ok := strings.CutPrefix(sc.Text(), "W ")
			if !ok {
				continue
			}
			if rest, ok := strings.CutPrefix(l, "took "); ok {
				var p, n int
				var last int64
				if _, err := fmt.Sscan(rest, &p, &n, &last); err == nil && p >= 0 && p < 2 {
					w.mu.Lock()
					w.took[p].n, w.took[p].last = n, last
					w.mu.Unlock()
				}
				continue
			}
			w.lines <- l
		}
	}()
	b.Cleanup(func() {
		_ = w.stdin.Close() // the worker closes its runtime and exits
		select {
		case <-w.exit:
		case <-time.After(2 * time.Minute):
			_ = w.cmd.Process.Kill()
			<-w.exit
		}
		if err := w.cmd.Wait(); err != nil {
			b.Errorf("paced worker %d: %v", i, err)
		}
	})
	return w
}

func (w *pacedWorker) send(b *testing.B, cmd string) {
	b.Helper()
	if _, err := fmt.Fprintln(w.stdin, cmd); err != nil {
		b.Fatalf("worker %d: %s: %v", w.i, cmd, err)
	}
}

func (w *pacedWorker) next(b *testing.B, timeout time.Duration) string {
	b.Helper()
	select {
	case l := <-w.lines:
		return l
	case <-w.exit:
		b.Fatalf("worker %d exited", w.i)
	case <-time.After(timeout):
		b.Fatalf("worker %d: no line within %v", w.i, timeout)
	}
	return ""
}

func (w *pacedWorker) expect(b *testing.B, want string, timeout time.Duration) {
	b.Helper()
	if l := w.next(b, timeout); l != want {
		b.Fatalf("worker %d: %q, want %q", w.i, l, want)
	}
}

func (w *pacedWorker) taken(p int) (n int, last int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.took[p].n, w.took[p].last
}

// pacedWorkerMain is a worker process of
// BenchmarkForwardedAtHalfRateProcesses: runtime "fpp-<index>" on its own
// client (the options of the one-process benchmark's clients), driven by
// commands on stdin, reporting on stdout ("W " lines). It returns the exit
// code.
func pacedWorkerMain() int {
	id, _ := strconv.Atoi(os.Getenv(pacedWorkerEnv))
	o, err := redis.ParseURL(os.Getenv("PW_URL"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	o.PoolSize = benchPoolSize
	o.ContextTimeoutEnabled = true // as redistest.Server.ClientOptions and redisstreams.NewURL
	c := redis.NewClient(o)
	defer c.Close()
	be, err := redisstreams.New(c, redisstreams.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer be.Close()

	var (
		outMu sync.Mutex
		out   = bufio.NewWriter(os.Stdout)
		mu    sync.Mutex
		arr   = map[int]int64{} // phase-1 signal → when taken
		seeds atomic.Int64
		took  [2]struct{ n, last atomic.Int64 }
		snd   = map[int]int64{} // phase-1 signal this process sent → when its Send started
	)
	say := func(format string, args ...any) {
		outMu.Lock()
		defer outMu.Unlock()
		fmt.Fprintf(out, "W "+format+"\n", args...)
		_ = out.Flush()
	}
	take := func(sid string) {
		now := time.Now().UnixNano()
		if strings.HasPrefix(sid, "seed-") {
			seeds.Add(1)
			return
		}
		p, _ := strconv.Atoi(sid[1:2])
		k, _ := strconv.Atoi(sid[3:])
		if p == 1 {
			mu.Lock()
			_, dup := arr[k]
			if !dup {
				arr[k] = now
			}
			mu.Unlock()
			if dup {
				return
			}
		}
		took[p].n.Add(1)
		for {
			l := took[p].last.Load()
			if now <= l || took[p].last.CompareAndSwap(l, now) {
				break
			}
		}
	}
	agent := func(ctx context.Context, run *signals.Run) error {
		for _, s := range run.Signals {
			take(s.ID)
		}
		for {
			s, ok := run.Next(ctx)
			if !ok {
				return nil
			}
			take(s.ID)
		}
	}
	rt, err := signals.New(be, agent, signals.WithProcessID(fmt.Sprint("fpp-", id)), signals.WithNextWait(time.Hour))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = rt.Close(ctx)
	}()
	ctx := context.Background()
	send := func(p, k int) {
		th := k % pacedThreads
		if p == 1 {
			mu.Lock()
			snd[k] = time.Now().UnixNano()
			mu.Unlock()
		}
		acc, err := rt.Send(ctx, fmt.Sprint("fp-", th), signals.Signal{ID: fmt.Sprintf("p%d-%d", p, k), Type: "msg"})
		if err != nil || acc.Action != signals.Forwarded {
			fmt.Fprintf(os.Stderr, "paced worker %d: send p%d-%d: %v, %v; want Forwarded\n", id, p, k, acc.Action, err)
		}
	}
	// Report what was taken, every 5ms while it changes.
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		var reported [2]int64
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			for p := range took {
				if n := took[p].n.Load(); n != reported[p] {
					reported[p] = n
					say("took %d %d %d", p, n, took[p].last.Load())
				}
			}
		}
	}()
	say("ready")
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		num := func(i int) int64 { n, _ := strconv.ParseInt(f[i], 10, 64); return n }
		switch f[0] {
		case "seed":
			mine := 0
			for th := range pacedThreads {
				if th%pacedRuntimes != id {
					continue
				}
				mine++
				acc, err := rt.Send(ctx, fmt.Sprint("fp-", th), signals.Signal{ID: fmt.Sprint("seed-", th), Type: "msg"})
				if err != nil || acc.Action != signals.Woke {
					fmt.Fprintf(os.Stderr, "paced worker %d: seed %d: %v, %v; want Woke\n", id, th, acc.Action, err)
					return 1
				}
			}
			for seeds.Load() < int64(mine) {
				time.Sleep(time.Millisecond)
			}
			say("seeded")
		case "burst":
			n, senders := int(num(1)), int(num(2))
			var next atomic.Int64
			var wg sync.WaitGroup
			for range senders {
				wg.Go(func() {
					for {
						k := int(next.Add(1) - 1)
						if k >= n {
							return
						}
						if pacedSender(k) == id {
							send(0, k)
						}
					}
				})
			}
			wg.Wait()
			say("sent")
		case "paced":
			n, start, interval := int(num(1)), time.Unix(0, num(2)), time.Duration(num(3))
			var wg sync.WaitGroup
			for k := range n {
				if pacedSender(k) != id {
					continue
				}
				if d := time.Until(start.Add(time.Duration(k) * interval)); d > 0 {
					time.Sleep(d)
				}
				wg.Go(func() { send(1, k) })
			}
			wg.Wait()
			say("sent")
		case "dump":
			mu.Lock()
			for k, ns := range snd {
				say("snd %d %d", k, ns)
			}
			for k, ns := range arr {
				say("arr %d %d", k, ns)
			}
			mu.Unlock()
			say("dumped")
		}
	}
	return 0
}
