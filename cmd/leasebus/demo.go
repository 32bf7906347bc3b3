package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

// demoConfig holds the demo's flags.
type demoConfig struct {
	workers, threads, signals int
	duration, ttl             time.Duration
	seed                      uint64
	kill                      bool
	fault                     string
	work, recovery            time.Duration
	perRun                    int
	width                     int
}

func runDemo(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "demo", "demo [flags]",
		`Start --workers worker processes (this binary, re-executed) that share one
Redis, send --signals signals to each of --threads threads from all of them,
SIGKILL the owner of a thread in the middle of a run, and show what happened:
a per-thread timeline (which process owned each thread when, hand-offs, the
takeover after the kill) and a verdict computed from the events the workers
recorded in Redis: one owner at a time (fencing tokens strictly increasing
per thread, no overlapping runs), every signal run, gap-free hand-offs, and
the takeover of the killed worker's threads. It stops as soon as every
signal ran; exits 1 when a guarantee broke.

Without --redis (or LEASEBUS_REDIS_URL) it runs on an embedded
Redis-protocol server (miniredis) on a loopback port.`)
	var c demoConfig
	redisFlag := fs.redisFlag()
	fs.IntVar(&c.workers, "workers", 3, "number of worker `processes`")
	fs.IntVar(&c.threads, "threads", 4, "number of `threads`")
	fs.IntVar(&c.signals, "signals", 5, "signals sent to each thread (`n`)")
	fs.DurationVar(&c.duration, "duration", 50*time.Second, "upper bound on the run (`d`); signals not run by then fail the verdict")
	fs.Uint64Var(&c.seed, "seed", 0, "random `seed` of the send order (default: from the clock, printed)")
	fs.DurationVar(&c.ttl, "lease-ttl", 2*time.Second, "lease `TTL` of the threads, 100ms to 24h (short, so the takeover after the kill is quick)")
	fs.BoolVar(&c.kill, "kill", true, "SIGKILL the owner of a thread in the middle of a run")
	fs.StringVar(&c.fault, "break", "", "inject a fault the verdict must catch: double-run (a worker runs a thread without its lease)")
	fs.DurationVar(&c.work, "work", 150*time.Millisecond, "work per signal")
	fs.DurationVar(&c.recovery, "recovery", 500*time.Millisecond, "recovery interval of the runtimes")
	fs.IntVar(&c.perRun, "per-run", 2, "signals one run takes at most before handing off")
	fs.IntVar(&c.width, "width", 0, "timeline width in columns (default: fit the terminal, 60 otherwise)")
	fs.hide("break", "work", "recovery", "per-run", "width")
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) != 0:
		return usageErrorf("unexpected argument %q (see leasebus demo --help)", pos[0])
	case c.workers < 1 || c.workers > 26:
		return usageErrorf("--workers %d is not between 1 and 26", c.workers)
	case c.threads < 1 || c.threads > 50:
		return usageErrorf("--threads %d is not between 1 and 50", c.threads)
	case c.signals < 1 || c.signals > 1000:
		return usageErrorf("--signals %d is not between 1 and 1000", c.signals)
	case c.duration <= 0:
		return usageErrorf("--duration %v is not positive", c.duration)
	case c.ttl < 100*time.Millisecond:
		return usageErrorf("--lease-ttl %v is below 100ms", c.ttl)
	case c.ttl > signals.MaxLeaseTTL:
		// The workers' runtimes would refuse it (signals.WithLeaseTTL).
		return usageErrorf("--lease-ttl %v is above %v (signals.MaxLeaseTTL)", c.ttl, signals.MaxLeaseTTL)
	case c.fault != "" && c.fault != "double-run":
		return usageErrorf("--break %q: the only fault is double-run", c.fault)
	case c.work <= 0 || c.recovery <= 0 || c.perRun < 1:
		return usageErrorf("--work, --recovery and --per-run must be positive")
	case c.recovery < signals.MinInterval:
		return usageErrorf("--recovery %v is below %v (signals.MinInterval)", c.recovery, signals.MinInterval)
	}
	if c.seed == 0 {
		c.seed = uint64(time.Now().UnixNano()%1_000_000) + 1
	}
	url := fs.redisURL(redisFlag)
	where := ""
	if url == "" {
		srv, err := startEmbedded()
		if err != nil {
			return err
		}
		defer srv.Close()
		url = srv.URL()
		where = "embedded Redis-protocol server (miniredis) at " + strings.TrimPrefix(url, "redis://")
	} else {
		where = "Redis at " + redact(url)
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find own executable: %w", err)
	}
	var idb [4]byte
	_, _ = rand.Read(idb[:])
	keyspace := "leasebus-demo-" + hex.EncodeToString(idb[:])
	b, err := connect(ctx, url, redisstreams.Options{Prefix: keyspace}, e.stderr)
	if err != nil {
		return err
	}
	defer closeBackend(b)
	d := &demo{
		c: c, e: e, exe: exe, url: url, keyspace: keyspace, stream: keyspace + ":demo:events",
		client: b.Client(), tty: isTerminal(e.stdout),
	}
	if !strings.HasPrefix(where, "embedded") {
		defer d.cleanup(ctx)
	}
	fmt.Fprintf(e.stdout, "leasebus demo: %s, %s, %s per thread, lease TTL %v, seed %d\n",
		plural(c.workers, "worker"), plural(c.threads, "thread"), plural(c.signals, "signal"), c.ttl, c.seed)
	fmt.Fprintf(e.stdout, "on the %s, keys under %s\n", where, keyspace)
	fmt.Fprintf(e.stdout, "(%s)\n", watchHint(*redisFlag, url != "" && !strings.HasPrefix(where, "embedded"), keyspace))
	if c.kill && c.workers < 2 {
		fmt.Fprintln(e.stdout, "(--workers 1: no other worker could take a thread over, so the demo skips the kill)")
	}
	fmt.Fprintln(e.stdout)
	err = d.run(ctx)
	if ctx.Err() != nil {
		// Only an interrupt (SIGINT, SIGTERM) cancels the command's ctx: an
		// interrupted demo broke no guarantee, it did not finish.
		return &exitError{code: exitInterrupted, err: errors.New("interrupted; the workers were stopped")}
	}
	return err
}

// watchHint returns the demo's hint on watching the thread leases from
// another terminal. The command in it is meant to be copied, so it carries
// no masked password: with --redis it repeats the URL as the user typed it;
// from LEASEBUS_REDIS_URL it leaves --redis out (leases reads the same
// variable). The embedded server lives only as long as the demo (a few
// seconds), so for it the hint says how to run the demo on a server that
// outlives it instead of naming an address that will be gone.
func watchHint(flagURL string, external bool, keyspace string) string {
	watch := "leasebus leases --watch"
	switch {
	case !external:
		return "the embedded server stops with the demo; to watch the thread leases from another terminal, " +
			"run the demo on your own Redis: leasebus demo --redis redis://localhost:6379"
	case flagURL != "":
		watch += " --redis " + flagURL
	}
	return fmt.Sprintf("to watch the thread leases meanwhile: %s --keyspace %s --prefix %s", watch, keyspace, signals.InboxTopic(""))
}

// demo is one run of the demo command.
type demo struct {
	c                demoConfig
	e                *env
	exe, url         string
	keyspace, stream string
	client           redis.UniversalClient
	tty              bool
	workers          []*workerProc
	start            time.Time
	progressShown    bool
	threads          []string
	killedWorker     string
	rec              *recorder // the parent's records (begin, stop)
}

// workerProc is one worker process.
type workerProc struct {
	name   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	log    *syncBuffer
	done   chan struct{} // closed when Wait returned
	err    error
	killed bool // by the demo's kill (maybeKill)
	// stopKilled: killed by stopAll, after it did not stop in time.
	stopKilled bool
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) lastLine() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	lines := strings.Split(strings.TrimSpace(s.b.String()), "\n")
	return lines[len(lines)-1]
}

// workerName returns the name of worker i (from 0): w1, w2, ...
func workerName(i int) string { return fmt.Sprintf("w%d", i+1) }

// run runs the demo until every accepted signal ran, --duration passed or
// cmdCtx ended (an interrupt). Every step that waits for Redis returns at an
// interrupt, which then stops the workers within demoStopGrace
// (TestDemoCtrlCOnStoppedRedis: in the middle of the run, and at the begin
// and stop records).
func (d *demo) run(cmdCtx context.Context) error {
	c := d.c
	for i := 1; i <= c.threads; i++ {
		d.threads = append(d.threads, threadName(i))
	}
	ctx, cancel := context.WithTimeout(cmdCtx, c.duration)
	defer cancel()
	// Workers left running by an early return (an error) get demoStopGrace.
	defer d.stopAll(cmdCtx, demoStopGrace)
	for i := range c.workers {
		wc := workerConfig{
			url: d.url, keyspace: d.keyspace, stream: d.stream, name: workerName(i), index: i,
			workers: c.workers, threads: c.threads, signals: c.signals, perRun: c.perRun, seed: c.seed,
			ttl: c.ttl, recovery: c.recovery, work: c.work, fault: c.fault,
		}
		if err := d.spawn(wc); err != nil {
			return err
		}
	}
	d.start = time.Now()
	d.rec = &recorder{client: d.client, stream: d.stream, worker: "demo"}
	st := newLiveState(c)
	lastID := "0-0"
	seq := 0
	finished := false // the loop ended because every accepted signal ran
	for ctx.Err() == nil {
		// On cmdCtx, not ctx: with a client that honours ctx deadlines the
		// --duration deadline would cut the read, and that read error
		// can come before ctx says it ended (review revA: "read demo
		// records: i/o timeout" at the end of 2 of 4 runs).
		res, err := d.readRecords(cmdCtx, lastID)
		if err != nil && !errors.Is(err, redis.Nil) && cmdCtx.Err() == nil {
			return fmt.Errorf("read demo records: %w", err)
		}
		for _, s := range res {
			for _, m := range s.Messages {
				lastID = m.ID
				r := parseRecord(seq, m)
				seq++
				if line := st.apply(r); line != "" {
					d.say(line)
				}
			}
		}
		if cmdCtx.Err() != nil {
			break
		}
		if st.ready == c.workers && !st.started {
			st.started = true
			if err := d.rec.addUntil(cmdCtx, recBegin); err != nil {
				if cmdCtx.Err() != nil {
					break
				}
				return fmt.Errorf("record the start: %w", err)
			}
			d.start = time.Now()
			for _, w := range d.workers {
				fmt.Fprintln(w.stdin, "go")
			}
			d.say(fmt.Sprintf("%s up (pids %s); sending signals", plural(c.workers, "worker"), d.pids()))
		}
		for _, w := range d.workers {
			select {
			case <-w.done:
				if !w.killed && !st.exited[w.name] {
					st.exited[w.name] = true
					return fmt.Errorf("worker %s exited early (%v): %s", w.name, w.err, w.log.lastLine())
				}
			default:
			}
		}
		if v := d.maybeKill(cmdCtx, st); v != "" {
			d.say(v)
		}
		if st.finished(c) {
			d.say(fmt.Sprintf("all %s ran; stopping the workers", plural(len(st.accepted), "accepted signal")))
			finished = true
			break
		}
		d.progress(st)
	}
	if cmdCtx.Err() != nil {
		return d.interrupted(cmdCtx)
	}
	why := "done"
	if !finished {
		// (Not when the loop ended on finished and --duration passed
		// meanwhile: the demo did finish.)
		why = "duration"
		d.say(fmt.Sprintf("stopped after --duration %v with %d of %d accepted signals run", c.duration, st.ranAccepted(), len(st.accepted)))
	}
	// The end of the timeline: now, not the last event a worker recorded.
	_ = d.rec.addUntil(cmdCtx, recStop, "why", why)
	d.clearProgress()
	d.stopAll(cmdCtx, workerStopGrace)
	if cmdCtx.Err() != nil {
		return d.interrupted(cmdCtx)
	}
	for _, w := range d.workers {
		switch {
		case w.stopKilled:
			fmt.Fprintf(d.e.stdout, "worker %s did not stop within %v; killed: %s\n", w.name, workerStopGrace, w.log.lastLine())
		case !w.killed && w.err != nil:
			fmt.Fprintf(d.e.stdout, "worker %s exited with %v: %s\n", w.name, w.err, w.log.lastLine())
		}
	}

	// The whole record, including what the killed worker wrote before it died.
	rctx, rcancel := context.WithTimeout(cmdCtx, 10*time.Second)
	defer rcancel()
	msgs, err := untilDone(rctx, func(ctx context.Context) ([]redis.XMessage, error) {
		return d.client.XRange(ctx, d.stream, "-", "+").Result()
	})
	if cmdCtx.Err() != nil {
		return d.interrupted(cmdCtx)
	}
	if err != nil {
		return fmt.Errorf("read demo records: %w", err)
	}
	recs := make([]record, len(msgs))
	for i, m := range msgs {
		recs[i] = parseRecord(i, m)
	}
	a := analyze(recs, d.threads, c.ttl, c.recovery)
	fmt.Fprintln(d.e.stdout)
	drawTimeline(d.e.stdout, a, d.timelineWidth())
	fmt.Fprintln(d.e.stdout)
	ok := printVerdict(d.e.stdout, a.verdict(), len(recs))
	for _, w := range d.workers {
		if !w.killed && w.err != nil {
			ok = false
		}
	}
	if !ok {
		fmt.Fprintln(d.e.stdout, "\nLast log lines of the workers:")
		for _, w := range d.workers {
			last := w.log.lastLine()
			if last == "" {
				last = "(no output)"
			}
			fmt.Fprintf(d.e.stdout, "  %s: %s\n", w.name, last)
		}
		return &exitError{code: exitFailed, err: errors.New("a guarantee broke"), silent: true}
	}
	return nil
}

// interrupted ends a demo that was interrupted (cmdCtx ended): it stops the
// workers within demoStopGrace and returns nil (runDemo reports the
// interrupt).
func (d *demo) interrupted(cmdCtx context.Context) error {
	d.clearProgress()
	d.say("interrupted; stopping the workers")
	d.stopAll(cmdCtx, demoStopGrace)
	return nil
}

// untilDone runs f on ctx in a goroutine of its own and returns its result,
// or ctx's error as soon as ctx ends: go-redis does not end a read it is
// blocked in when ctx is cancelled, and an interrupted command must not wait
// for its timeouts (the call left behind ends when the command closes the
// client).
func untilDone[T any](ctx context.Context, f func(ctx context.Context) (T, error)) (T, error) {
	type reply struct {
		v   T
		err error
	}
	done := make(chan reply, 1)
	go func() {
		v, err := f(ctx)
		done <- reply{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

// spawn starts one worker process.
func (d *demo) spawn(wc workerConfig) error {
	cmd := exec.Command(d.exe, wc.args()...)
	cmd.Env = append(os.Environ(), redisEnv+"=")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	w := &workerProc{name: wc.name, cmd: cmd, stdin: stdin, log: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = w.log, w.log
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start worker %s: %w", wc.name, err)
	}
	go func() {
		w.err = cmd.Wait()
		close(w.done)
	}()
	d.workers = append(d.workers, w)
	return nil
}

func (d *demo) pids() string {
	var p []string
	for _, w := range d.workers {
		p = append(p, fmt.Sprintf("%s=%d", w.name, w.cmd.Process.Pid))
	}
	return strings.Join(p, " ")
}

// maybeKill SIGKILLs the owner of a run in progress once every worker sent
// its signals, and records the kill (until cmdCtx ends: an interrupt must
// not wait for the record on a Redis that stopped answering,
// TestDemoCtrlCOnStoppedRedis/AtKill). It returns a line to show, or "".
func (d *demo) maybeKill(cmdCtx context.Context, st *liveState) string {
	if !d.c.kill || d.killedWorker != "" || d.c.workers < 2 || !st.started || st.sentAll < d.c.workers {
		return ""
	}
	// The run in progress that took a signal most recently (at least 30ms
	// ago) and has not finished its work on it: killed there, the signal
	// must run again elsewhere, after a takeover.
	var best *liveRun
	for _, r := range st.open {
		if time.Since(r.seen) < 30*time.Millisecond || r.rogue || len(r.pending()) == 0 {
			continue
		}
		if best == nil || r.seen.After(best.seen) {
			best = r
		}
	}
	if best == nil {
		return ""
	}
	var victim *workerProc
	for _, w := range d.workers {
		if w.name == best.worker {
			victim = w
		}
	}
	if victim == nil {
		return ""
	}
	victim.killed = true
	_ = victim.cmd.Process.Kill()
	<-victim.done
	d.killedWorker = victim.name
	rec := &recorder{client: d.client, stream: d.stream, worker: victim.name}
	_ = rec.addUntil(cmdCtx, recKilled, "pid", fmt.Sprint(victim.cmd.Process.Pid))
	return fmt.Sprintf("SIGKILL %s (pid %d) in the middle of its run on %s (token %d, working on %s)",
		victim.name, victim.cmd.Process.Pid, best.thread, best.token, strings.Join(best.pending(), " "))
}

// The time workers get to stop (close their runtime, releasing the leases
// they hold) once their stdin closed, before they are killed: at the end of
// a run, and after an interrupt. A worker stuck on a Redis that stopped
// answering is killed after demoStopGrace: Ctrl-C must not wait for
// go-redis's timeouts (TestDemoCtrlCOnStoppedRedis).
const (
	workerStopGrace = 15 * time.Second
	demoStopGrace   = 3 * time.Second
)

// stopAll closes the workers' stdin (their signal to shut down) and waits
// for them, killing those that have not exited after grace, or after
// demoStopGrace once cmdCtx ends (an interrupt while they stop). It does
// nothing more once every worker exited.
func (d *demo) stopAll(cmdCtx context.Context, grace time.Duration) {
	for _, w := range d.workers {
		_ = w.stdin.Close()
	}
	end := time.Now().Add(grace)
	deadline := time.NewTimer(grace)
	defer deadline.Stop()
	interrupt := cmdCtx.Done()
	expired := false
	exited := func(w *workerProc) bool {
		for !expired {
			select {
			case <-w.done:
				return true
			case <-deadline.C:
				expired = true
			case <-interrupt:
				interrupt = nil
				if time.Until(end) > demoStopGrace {
					end = time.Now().Add(demoStopGrace)
					deadline.Reset(demoStopGrace)
				}
			}
		}
		return false
	}
	for _, w := range d.workers {
		if exited(w) {
			continue
		}
		// Past the grace: every worker still running is killed (the
		// timer fires once, so the ones after the first must not wait
		// for it again).
		select {
		case <-w.done:
			continue
		default:
		}
		w.stopKilled = true
		_ = w.cmd.Process.Kill()
		<-w.done
	}
}

// readRecords reads the demo's record stream after lastID, blocking up to
// 100ms. It returns when ctx ends even if Redis stopped answering
// (untilDone).
func (d *demo) readRecords(ctx context.Context, lastID string) ([]redis.XStream, error) {
	return untilDone(ctx, func(ctx context.Context) ([]redis.XStream, error) {
		return d.client.XRead(ctx, &redis.XReadArgs{Streams: []string{d.stream, lastID}, Block: 100 * time.Millisecond, Count: 500}).Result()
	})
}

// cleanup deletes the demo's keys from a Redis the user gave, giving up
// after 10s, or closeGrace after an interrupt (cmdCtx ending), also one
// that comes while it runs (TestDemoCtrlCOnStoppedRedis/AtCleanup); the keys
// left behind are the demo's own, under its keyspace. (The exit status is
// decided before: a demo that printed its verdict finished.)
func (d *demo) cleanup(cmdCtx context.Context) {
	limit := 10 * time.Second
	if cmdCtx.Err() != nil {
		limit = closeGrace
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(cmdCtx), limit)
	defer cancel()
	stop := context.AfterFunc(cmdCtx, func() {
		t := time.AfterFunc(closeGrace, cancel)
		context.AfterFunc(ctx, func() { t.Stop() })
	})
	defer stop()
	_, _ = untilDone(ctx, func(ctx context.Context) (struct{}, error) {
		iter := d.client.Scan(ctx, 0, d.keyspace+":*", 500).Iterator()
		var keys []string
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		for len(keys) > 0 {
			n := min(len(keys), 500)
			_ = d.client.Del(ctx, keys[:n]...).Err()
			keys = keys[n:]
		}
		return struct{}{}, nil
	})
}

// say prints a line of the run's log, above the progress line on a
// terminal.
func (d *demo) say(line string) {
	d.clearProgress()
	fmt.Fprintf(d.e.stdout, "%6.1fs  %s\n", time.Since(d.start).Seconds(), line)
}

func (d *demo) progress(st *liveState) {
	if !d.tty {
		return
	}
	line := fmt.Sprintf("%6.1fs  [%s] sent %d/%d · ran %d · runs %d (%d active) · hand-offs %d",
		time.Since(d.start).Seconds(), st.workerBar(d), len(st.accepted), d.c.threads*d.c.signals,
		st.ranAccepted(), st.runs, len(st.open), st.handoffs)
	if d.killedWorker != "" && !st.takenOver {
		line += " · waiting for the takeover"
	}
	fmt.Fprintf(d.e.stdout, "\r\x1b[K%s", line)
	d.progressShown = true
}

func (d *demo) clearProgress() {
	if d.progressShown {
		fmt.Fprint(d.e.stdout, "\r\x1b[K")
		d.progressShown = false
	}
}

// timelineWidth returns the columns of the timeline.
func (d *demo) timelineWidth() int {
	if d.c.width > 0 {
		return d.c.width
	}
	return 60
}

// liveRun is a run in progress, as the parent sees it.
type liveRun struct {
	worker, thread string
	token          uint64
	signals        []string        // given to the run, in order
	did            map[string]bool // of signals, those whose work is done
	seen           time.Time       // when the run started or last took a signal
	rogue          bool
}

// pending returns the signals the run was given and has not finished.
func (r *liveRun) pending() []string {
	var p []string
	for _, id := range r.signals {
		if !r.did[id] {
			p = append(p, id)
		}
	}
	return p
}

// liveState is what the parent knows while the demo runs.
type liveState struct {
	ready, sentAll int
	started        bool
	accepted       map[string]bool
	ran            map[string]bool     // signals whose work a run finished
	open           map[string]*liveRun // worker/run -> run in progress
	runs, handoffs int
	takenOver      bool
	killedThreads  map[string]bool   // threads the killed worker was working on, until taken over
	handedTo       map[string]string // worker/run a hand-off gave a lease to, until it starts -> thread
	exited         map[string]bool
	sentAllBy      map[string]bool
}

func newLiveState(c demoConfig) *liveState {
	return &liveState{
		accepted: map[string]bool{}, ran: map[string]bool{}, open: map[string]*liveRun{},
		killedThreads: map[string]bool{}, handedTo: map[string]string{}, exited: map[string]bool{}, sentAllBy: map[string]bool{},
	}
}

// apply updates the state with one record and returns a line worth showing.
func (st *liveState) apply(r record) string {
	key := r.Worker + "/" + r.Get("run")
	switch r.Kind {
	case recReady:
		st.ready++
	case recSent:
		st.accepted[r.Get("sig")] = true
	case recSendFail:
		return fmt.Sprintf("%s: send %s failed: %s", r.Worker, r.Get("sig"), r.Get("err"))
	case recSentAll:
		if !st.sentAllBy[r.Worker] {
			st.sentAllBy[r.Worker] = true
			st.sentAll++
			return fmt.Sprintf("%s sent its share of the signals", r.Worker)
		}
	case recStart, recRogue:
		delete(st.handedTo, key)
		st.runs++
		st.open[key] = &liveRun{worker: r.Worker, thread: r.Get("th"), token: r.Token("tok"), signals: r.List("sigs"),
			did: map[string]bool{}, seen: time.Now(), rogue: r.Kind == recRogue}
		if st.killedThreads[r.Get("th")] && r.Kind == recStart {
			delete(st.killedThreads, r.Get("th"))
			st.takenOver = true
			return fmt.Sprintf("%s took over %s (token %d)%s", r.Worker, r.Get("th"), r.Token("tok"), redeliveredNote(r))
		}
		if r.Kind == recRogue {
			return fmt.Sprintf("%s runs %s WITHOUT the lease (fault injected by --break=double-run)", r.Worker, r.Get("th"))
		}
	case recSignal:
		if run := st.open[key]; run != nil {
			run.signals = append(run.signals, r.Get("sig"))
			run.seen = time.Now()
		}
	case recDid:
		if run := st.open[key]; run != nil && !run.rogue {
			run.did[r.Get("sig")] = true
			st.ran[r.Get("sig")] = true
		}
	case recEnd:
		delete(st.open, key)
	case recKilled:
		// Every record of the killed worker precedes this one.
		for k, run := range st.open {
			if run.worker == r.Worker {
				if len(run.pending()) > 0 {
					st.killedThreads[run.thread] = true
				}
				delete(st.open, k)
			}
		}
		for k, th := range st.handedTo { // killed between a hand-off and the start
			if strings.HasPrefix(k, r.Worker+"/") {
				st.killedThreads[th] = true
				delete(st.handedTo, k)
			}
		}
	case recObserved:
		if r.Get("ev") == "handed-off" {
			st.handoffs++
			st.handedTo[key] = r.Get("th")
		}
	}
	return ""
}

func redeliveredNote(r record) string {
	if redel := r.List("redel"); len(redel) > 0 {
		return ", redelivered " + strings.Join(redel, " ")
	}
	return ""
}

// finished reports whether the demo can stop: every worker sent its share,
// every accepted signal ran, no run is in progress, and the threads the
// killed worker was working on were taken over.
func (st *liveState) finished(c demoConfig) bool {
	if !st.started || st.sentAll < c.workers || len(st.open) > 0 || len(st.killedThreads) > 0 {
		return false
	}
	return st.ranAccepted() == len(st.accepted)
}

// ranAccepted returns how many accepted signals ran.
func (st *liveState) ranAccepted() int {
	n := 0
	for id := range st.accepted {
		if st.ran[id] {
			n++
		}
	}
	return n
}

// workerBar shows each worker as its number, or x once killed.
func (st *liveState) workerBar(d *demo) string {
	var b strings.Builder
	for _, w := range d.workers {
		if w.killed {
			b.WriteString("x")
		} else {
			b.WriteByte(workerMark(w.name))
		}
	}
	return b.String()
}
