package signals_test

import (
	"context"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
	"github.com/leasebus/leasebus/signals/internal/sigtest"
)

// startRedis is sigtest.StartRedis.
func startRedis(t *testing.T) (*redistest.Server, *redis.Client) { return sigtest.StartRedis(t) }

func TestProcRapidFire(t *testing.T) {
	srv, c := startRedis(t)
	var ws []*worker
	for i := range 3 {
		w := startWorker(t, srv.URL(), workerCfg{ID: fmt.Sprint("p", i), Mode: "send", Thread: "rf",
			Sigs: []string{fmt.Sprint("s", i)}, Delay: 300 * time.Millisecond, GoKey: "go"})
		w.expect(t, "ready", 10*time.Second)
		ws = append(ws, w)
	}
	c.Set(context.Background(), "go", "1", 0)
	woke := 0
	winner := ""
	for i, w := range ws {
		l := w.expect(t, "sent", 10*time.Second)
		if strings.Fields(l)[2] == "woke" {
			woke++
			winner = fmt.Sprint("p", i)
		}
	}
	if woke != 1 {
		t.Fatalf("%d sends woke, want exactly 1", woke)
	}
	for _, e := range waitLog(t, c, "rf", 3, 10*time.Second) {
		if e.Proc != winner {
			t.Fatalf("signal %s ran on %s, want the winner %s", e.ID, e.Proc, winner)
		}
	}
}

func TestProcSenderExits(t *testing.T) {
	srv, c := startRedis(t)
	a := startWorker(t, srv.URL(), workerCfg{ID: "live", Mode: "serve"})
	a.expect(t, "ready", 10*time.Second)
	s := startWorker(t, srv.URL(), workerCfg{ID: "sender", Mode: "send-exit", Thread: "se", Sigs: []string{"x"}})
	l := s.expect(t, "sent", 10*time.Second)
	s.wait(t, 10*time.Second)
	t.Logf("sender: %s", l)
	e := waitLog(t, c, "se", 1, procTTL+5*time.Second)
	t.Logf("ran by %s", e[0].Proc)
}

func TestProcGapFree(t *testing.T) {
	srv, c := startRedis(t)
	b, err := redisstreams.NewURL(context.Background(), srv.URL(), redisstreams.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var ids []string
	for i := range 8 {
		ids = append(ids, fmt.Sprint("g", i))
	}
	w := startWorker(t, srv.URL(), workerCfg{ID: "gp", Mode: "send", Thread: "gap", Sigs: ids,
		Delay: 30 * time.Millisecond, NoNext: true, GoKey: "go"})
	w.expect(t, "ready", 10*time.Second)
	type obs struct {
		owner string
		at    time.Time
	}
	var seen []obs
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			o, err := b.GetLeaseOwner(context.Background(), signals.LeaseKey("gap"))
			if err == nil {
				seen = append(seen, obs{o, time.Now()})
			}
			time.Sleep(time.Millisecond)
		}
	})
	c.Set(context.Background(), "go", "1", 0)
	waitLog(t, c, "gap", len(ids), 10*time.Second)
	lastStart := time.Now()
	time.Sleep(50 * time.Millisecond)
	close(stop)
	wg.Wait()
	owners := map[string]bool{}
	started := false
	for _, o := range seen {
		if o.owner != "" {
			started = true
			owners[o.owner] = true
			continue
		}
		if started && o.at.Before(lastStart.Add(-20*time.Millisecond)) {
			t.Fatalf("lease key empty at %v while signals were queued (tenures so far %d)", o.at, len(owners))
		}
	}
	if len(owners) < 2 {
		t.Fatalf("saw %d tenures, want at least 2", len(owners))
	}
	t.Logf("%d polls, %d tenures", len(seen), len(owners))
}

func TestProcOwnerKilled(t *testing.T) {
	srv, c := startRedis(t)
	b := startWorker(t, srv.URL(), workerCfg{ID: "B", Mode: "serve", Delay: 50 * time.Millisecond})
	b.expect(t, "ready", 10*time.Second)
	ids := []string{"k0", "k1", "k2", "k3", "k4"}
	a := startWorker(t, srv.URL(), workerCfg{ID: "A", Mode: "send", Thread: "k", Sigs: ids, Delay: 5 * time.Second})
	for range ids {
		if l := a.expect(t, "sent", 10*time.Second); !strings.Contains(l, "k0") && strings.Contains(l, "woke") {
			t.Fatalf("unexpected %s", l)
		}
	}
	a.expect(t, "ran k k0", 10*time.Second)
	a.signal(t, syscall.SIGKILL)
	killed := time.Now()
	first := waitLog(t, c, "k", 1, 10*time.Second)
	for len(first) < 2 && time.Since(killed) < procTTL+time.Second {
		time.Sleep(10 * time.Millisecond)
		first = readLog(t, c, "k")
	}
	if len(first) < 2 {
		t.Fatalf("no takeover within TTL + recovery interval + 0.8s: %+v", first)
	}
	t.Logf("first recovered run %v after the kill", time.Since(killed))
	l := waitLog(t, c, "k", len(ids), 5*time.Second)
	var after []string
	for _, e := range l {
		if e.Proc == "B" {
			after = append(after, fmt.Sprintf("%s/%t", e.ID, e.Redelivered))
		}
	}
	// A was killed in the middle of k0: B claims it first, as a redelivery,
	// and then runs k1..k4, which A never took, in order.
	if got, want := fmt.Sprint(after), "[k0/true k1/false k2/false k3/false k4/false]"; got != want {
		t.Fatalf("B ran (signal/redelivered) %v, want %v", got, want)
	}
	if l[len(l)-1].Token <= l[0].Token {
		t.Fatalf("takeover token %d not above %d", l[len(l)-1].Token, l[0].Token)
	}
}

func TestProcOwnerPaused(t *testing.T) {
	srv, c := startRedis(t)
	b := startWorker(t, srv.URL(), workerCfg{ID: "B", Mode: "serve"})
	b.expect(t, "ready", 10*time.Second)
	a := startWorker(t, srv.URL(), workerCfg{ID: "A", Mode: "send", Thread: "st", Sigs: []string{"p0"}, Stuck: 500 * time.Millisecond})
	a.expect(t, "ran st p0", 10*time.Second)
	a.signal(t, syscall.SIGSTOP)
	l := waitLog(t, c, "st", 1, 10*time.Second)
	deadline := time.Now().Add(procTTL + 5*time.Second)
	for len(l) < 2 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		l = readLog(t, c, "st")
	}
	if len(l) < 2 || l[1].Proc != "B" || !l[1].Redelivered || l[1].Token <= l[0].Token {
		t.Fatalf("B did not take over p0 as a redelivery with a higher token: %+v", l)
	}
	a.signal(t, syscall.SIGCONT)
	var late string
	deadline = time.Now().Add(5 * time.Second)
	for late == "" && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		late = c.Get(context.Background(), "late:st").Val()
	}
	if late != "ctxdone=true fence=0" {
		t.Fatalf("paused owner after resume: %q, want its ctx cancelled and its late write fenced off", late)
	}
}

// Soak: 3 processes × soakThreads threads × soakPer signals, sent in batches
// by different processes (a batch starts after the previous one of its
// thread was sent, through a counter in Redis that counts each signal once
// its Send returned), one process SIGKILLed once a third of the signals ran
// and restarted under the same name. The restarted one goes on from the
// counter: a signal whose Send returned nil to the killed process is not
// sent again (only the one whose Send was in flight, or had returned but
// not yet been counted, at the kill), so each of them must run because it
// was stored, not because it was re-sent.
const (
	soakThreads = 200
	soakPer     = 20
	soakBatch   = 5
	soakTotal   = soakThreads * soakPer
	// soakWait bounds each phase of the soak; the whole test takes well
	// under a minute on two cores with -race.
	soakWait = 90 * time.Second
)

func soakSender(thread, batch int) string {
	h := fnv.New32a()
	fmt.Fprintf(h, "%d/%d", thread, batch)
	return fmt.Sprint("w", h.Sum32()%3)
}

func soakSend(t *testing.T, rt *signals.Runtime, c redis.UniversalClient, id string) {
	ctx := context.Background()
	var wg sync.WaitGroup
	for th := range soakThreads {
		wg.Go(func() {
			thread := fmt.Sprint("soak", th)
			for b := range soakPer / soakBatch {
				if soakSender(th, b) != id {
					continue
				}
				for {
					n, _ := c.Get(ctx, "sent:"+thread).Int()
					if n >= (b+1)*soakBatch {
						break
					}
					if n >= b*soakBatch {
						// From the first signal not counted: one the
						// killed process was told was stored is not
						// sent again.
						for i := n; i < (b+1)*soakBatch; i++ {
							if _, err := rt.Send(ctx, thread, signals.Signal{ID: fmt.Sprintf("%s-%02d", thread, i), Type: "msg"}); err != nil {
								fmt.Println("W send error", err)
								return
							}
							if err := c.Incr(ctx, "sent:"+thread).Err(); err != nil {
								fmt.Println("W count error", err)
								return
							}
						}
						break
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
		})
	}
	wg.Wait()
	fmt.Println("W soak-sent")
}

// soakAlive fails the test, with the worker's last lines, when one of ws has
// exited: a worker that dies during the soak must not turn into a hang.
func soakAlive(t *testing.T, ws []*worker) {
	t.Helper()
	for _, w := range ws {
		if out, err := w.exited(); out {
			w.mu.Lock()
			tail := w.tail()
			w.mu.Unlock()
			t.Fatalf("worker %s exited during the soak (%v); last lines: %q", w.name, err, tail)
		}
	}
}

// soakSent returns how many signals' Sends returned nil so far, over all
// threads of the soak.
func soakSent(t *testing.T, c *redis.Client) int {
	t.Helper()
	keys := make([]string, soakThreads)
	for th := range keys {
		keys[th] = fmt.Sprint("sent:soak", th)
	}
	vs, err := c.MGet(context.Background(), keys...).Result()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, v := range vs {
		if s, ok := v.(string); ok {
			k, _ := strconv.Atoi(s)
			n += k
		}
	}
	return n
}

func TestProcSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped with -short: the multi-process soak")
	}
	srv, c := startRedis(t)
	ctx := context.Background()
	start := time.Now()
	ws := make([]*worker, 3)
	for i := range ws {
		ws[i] = startWorker(t, srv.URL(), workerCfg{ID: fmt.Sprint("w", i), Mode: "soak", Delay: time.Millisecond, GoKey: "go"})
	}
	for _, w := range ws {
		w.expect(t, "ready", 30*time.Second)
	}
	c.Set(ctx, "go", "1", 0)

	// Kill w1 once an eighth of the signals ran and a third were sent
	// (sends run ahead of runs, and end well before them): threads are in
	// flight everywhere, w1 holds some of them mid-run and is in the
	// middle of some of its batches.
	deadline := time.Now().Add(soakWait)
	for {
		soakAlive(t, ws)
		n, _ := c.Get(ctx, "runs").Int()
		if n >= soakTotal/8 && soakSent(t, c) >= soakTotal/3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d signals sent and %d run within %v, before the kill", soakSent(t, c), soakTotal, n, soakWait)
		}
		time.Sleep(5 * time.Millisecond)
	}
	ws[1].signal(t, syscall.SIGKILL)
	ws[1].wait(t, 10*time.Second)
	killedAt := time.Now()
	// Signals the killed process was told were stored, in batches it had
	// not finished: the restarted one does not send them again.
	unfinished := 0
	for th := range soakThreads {
		n, _ := c.Get(ctx, fmt.Sprint("sent:soak", th)).Int()
		if n%soakBatch != 0 && soakSender(th, n/soakBatch) == "w1" {
			unfinished += n % soakBatch
		}
	}
	ranAtKill, _ := c.Get(ctx, "runs").Int()
	t.Logf("at the kill, %d signals sent, %d run; w1 had %d stored signals in batches it had not finished (not sent again)",
		soakSent(t, c), ranAtKill, unfinished)
	ws[1] = startWorker(t, srv.URL(), workerCfg{ID: "w1", Inc: "#2", Mode: "soak", Delay: time.Millisecond, GoKey: "go"})
	ws[1].expect(t, "ready", 30*time.Second)

	// Wait for every signal of every thread to have run.
	var open []int
	for th := range soakThreads {
		open = append(open, th)
	}
	deadline = time.Now().Add(soakWait)
	for len(open) > 0 {
		soakAlive(t, ws)
		rest := open[:0]
		for _, th := range open {
			if distinct(readLog(t, c, fmt.Sprint("soak", th))) < soakPer {
				rest = append(rest, th)
			}
		}
		open = rest
		if len(open) == 0 {
			break
		}
		if time.Now().After(deadline) {
			thread := fmt.Sprint("soak", open[0])
			t.Fatalf("%d threads unfinished %v after the restart; thread %s: %d of %d signals run (sent %s): %+v",
				len(open), soakWait, thread, distinct(readLog(t, c, thread)), soakPer,
				c.Get(ctx, "sent:"+thread).Val(), readLog(t, c, thread))
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("all %d signals run %v after start (kill at +%v)", soakTotal, time.Since(start), killedAt.Sub(start))
	soakSettled(t, c)
	if v := c.Get(ctx, "violations").Val(); v != "" && v != "0" {
		t.Fatalf("%s fenced writes refused while the writer's run ctx was live (two runs of one thread at once)", v)
	}

	// Per thread, strictly: every signal ran; first runs are in send order
	// unless marked Redelivered; a signal runs again only when the process
	// of its run before never got past it (its agent never got the next
	// signal from Run.Next, which the runtime returns only after recording
	// the previous one as done), and then only as a redelivery with a
	// higher token than that run's, after one of two things: that run was
	// on the killed process (w1, first incarnation) and this one is on
	// another, or that run's tenure reported LeaseLost (its process stalled
	// past the TTL on a loaded machine, and fail-closed ended the tenure;
	// the worker records it in "lost:<thread>"). A stall and the kill may
	// both hit one signal (three runs); more than four runs is taken as a
	// loop.
	const killed = "w1"
	dups, refused, reorders, lostRuns := 0, 0, 0, 0
	for th := range soakThreads {
		thread := fmt.Sprint("soak", th)
		l := readLog(t, c, thread)
		fin, err := c.HGetAll(ctx, "fin:"+thread).Result()
		if err != nil {
			t.Fatal(err)
		}
		lostTenure, err := c.HGetAll(ctx, "lost:"+thread).Result()
		if err != nil {
			t.Fatal(err)
		}
		first := map[string]logEntry{}
		last := map[string]logEntry{} // each signal's latest run
		runs := map[string]int{}
		highest := -1
		for _, e := range l {
			if !e.FenceOK {
				refused++ // a stale owner's start, refused by the fence: not a run
				continue
			}
			n, err := strconv.Atoi(e.ID[strings.LastIndexByte(e.ID, '-')+1:])
			if err != nil || n < 0 || n >= soakPer {
				t.Fatalf("thread %s: unexpected signal %q in the log", thread, e.ID)
			}
			runs[e.ID]++
			_, seen := first[e.ID]
			f := last[e.ID] // the run before this one
			last[e.ID] = e
			switch {
			case !seen:
				first[e.ID] = e
				if n < highest {
					if !e.Redelivered {
						t.Errorf("thread %s: %s ran after signal %d without being marked Redelivered: %+v", thread, e.ID, highest, l)
					}
					reorders++
				}
				highest = max(highest, n)
			default:
				dups++
				lost := lostTenure[fmt.Sprintf("%s/%d", f.Proc, f.Token)] != ""
				if lost {
					lostRuns++
				}
				switch {
				case runs[e.ID] > 4:
					t.Errorf("thread %s: %s ran %d times: %+v", thread, e.ID, runs[e.ID], l)
				case f.Proc != killed && !lost:
					t.Errorf("thread %s: %s ran again although its run before was on %s, which was not killed and did not lose its lease: %+v", thread, e.ID, f.Proc, l)
				case fin[fmt.Sprintf("%s/%s/%d", e.ID, f.Proc, f.Token)] != "":
					t.Errorf("thread %s: %s ran again although %s (token %d) had got past it: %+v", thread, e.ID, f.Proc, f.Token, l)
				case !e.Redelivered || e.Token <= f.Token:
					t.Errorf("thread %s: %s ran again but not as a redelivery with a higher token: %+v", thread, e.ID, l)
				case e.Proc == killed && !lost:
					t.Errorf("thread %s: %s ran again on the killed process %s, which did not lose its lease: %+v", thread, e.ID, killed, l)
				}
				if n < highest {
					reorders++
					t.Errorf("thread %s: redelivered %s ran after signal %d: %+v", thread, e.ID, highest, l)
				}
			}
		}
		if len(first) != soakPer {
			t.Errorf("thread %s: %d distinct signals ran, want %d: %+v", thread, len(first), soakPer, l)
		}
	}
	t.Logf("%d threads checked: %d second runs (redeliveries after the kill, %d of them after a reported lease loss), %d starts refused by the fence, %d first runs out of order (all Redelivered)",
		soakThreads, dups, lostRuns, refused, reorders)
}

// TestProcOwnerBlackHoled cuts the owner's runtime off from Redis mid-run
// the way a dead network path does (its connections stay open, nothing
// answers; its runtime uses NewURL's client with default options) while its
// agent's fenced writes still reach Redis. The owner's run ctx must be
// cancelled before another process's run of the thread starts: the owner's
// fenced write at the cancel is accepted (no newer token had been used), and
// its cancel time is before the start of B's run.
func TestProcOwnerBlackHoled(t *testing.T) {
	srv, c := startRedis(t)
	proxy := redistest.NewProxy(t, srv.Addr())
	b := startWorker(t, srv.URL(), workerCfg{ID: "B", Mode: "serve", Delay: 50 * time.Millisecond})
	b.expect(t, "ready", 10*time.Second)
	a := startWorker(t, srv.URL(), workerCfg{ID: "A", Mode: "send", Thread: "h", Sigs: []string{"h0"}, Delay: time.Minute, Via: proxy.Addr()})
	a.expect(t, "ran h h0", 10*time.Second)
	proxy.BlackHole()
	holed := time.Now()

	var aTok uint64
	var aAt int64
	var aFence bool
	if _, err := fmt.Sscanf(a.expect(t, "cancelled h h0", 2*procTTL), "cancelled h h0 %d %d fence=%t", &aTok, &aAt, &aFence); err != nil {
		t.Fatal(err)
	}
	line := b.expect(t, "started h h0", 2*procTTL+5*time.Second)
	var bTok uint64
	var bAt int64
	if _, err := fmt.Sscanf(line, "started h h0 %d %d", &bTok, &bAt); err != nil {
		t.Fatal(err)
	}
	t.Logf("A's run cancelled %v after the black hole; B started %v after it (tokens %d, %d)",
		time.Duration(aAt-holed.UnixNano()).Round(time.Millisecond), time.Duration(bAt-aAt).Round(time.Millisecond), aTok, bTok)
	if !aFence {
		t.Fatalf("A's fenced write at its cancel was refused: a newer run had started before A's ctx was cancelled")
	}
	if aAt >= bAt {
		t.Fatalf("A's run ctx was cancelled %v after B's run started", time.Duration(aAt-bAt))
	}
	if bTok <= aTok {
		t.Fatalf("B's token %d not above A's %d", bTok, aTok)
	}
	if v, _ := c.Get(context.Background(), "violations").Int(); v != 0 {
		t.Fatalf("%d fenced writes refused while their run's ctx was live", v)
	}
}

// soakSettled waits until nothing stays pending once every signal ran: no
// wake notice unacked or unread on the work topic, no inbox entry unacked
// or unread (an inbox may be gone: tenures delete drained inboxes). The
// bound is generous: notices come back every recovery interval (200ms in
// the workers) and each is acked at its first check once its signal is in
// the done record.
func soakSettled(t *testing.T, c *redis.Client) {
	t.Helper()
	ctx := context.Background()
	b, err := redisstreams.New(c, redisstreams.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	const bound = 30 * time.Second
	deadline := time.Now().Add(bound)
	start := time.Now()
	for {
		var left []string
		bl, err := b.GroupBacklog(ctx, signals.WorkTopic, signals.WorkGroup)
		if err != nil {
			t.Fatal(err)
		}
		if bl.Pending != 0 || bl.Lag != 0 {
			left = append(left, fmt.Sprintf("work topic: %d pending, %d unread", bl.Pending, bl.Lag))
		}
		for th := range soakThreads {
			thread := fmt.Sprint("soak", th)
			bl, err := b.GroupBacklog(ctx, signals.InboxTopic(thread), signals.InboxGroup)
			if err != nil {
				t.Fatal(err)
			}
			if bl.Pending != 0 || bl.Lag != 0 {
				left = append(left, fmt.Sprintf("inbox of %s: %d pending, %d unread", thread, bl.Pending, bl.Lag))
			}
		}
		if len(left) == 0 {
			t.Logf("every notice and inbox entry acked %v after the last signal ran", time.Since(start).Round(time.Millisecond))
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v after every signal ran, still pending: %d places, first %q", bound, len(left), left[0])
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// The backlog of TestProcTakeoverBehindBacklog: 20 threads, each running a
// 30s signal with 25 more queued behind it (500 in all).
const (
	backlogThreads = 20
	backlogPer     = 25
)

// TestProcTakeoverBehindBacklog: while 500 signals wait behind 30s runs on
// 20 threads of process B (their wake notices cycle through every
// runtime's notice handlers), process A, owner of thread x, is SIGKILLed
// mid-run. A live process (B or C) must take x over within TTL + recovery
// interval + 1s of the kill. (Notice handlers used to hold their notices
// for the length of a run: 64 of them at a time, and x's notice waited
// behind the backlog for as long as the runs lasted.)
func TestProcTakeoverBehindBacklog(t *testing.T) {
	srv, c := startRedis(t)
	const recovery = 200 * time.Millisecond // the workers' recovery interval
	busy := startWorker(t, srv.URL(), workerCfg{ID: "B", Mode: "backlog", Delay: 30 * time.Second})
	peer := startWorker(t, srv.URL(), workerCfg{ID: "C", Mode: "serve", Delay: 30 * time.Second})
	busy.expect(t, "ready", 30*time.Second)
	peer.expect(t, "ready", 30*time.Second)
	busy.expect(t, "backlog-sent", 60*time.Second)
	for th := range backlogThreads {
		waitLog(t, c, fmt.Sprint("busy", th), 1, 30*time.Second)
	}
	a := startWorker(t, srv.URL(), workerCfg{ID: "A", Mode: "send", Thread: "x", Sigs: []string{"x0"}, Delay: time.Minute})
	a.expect(t, "ran x x0", 30*time.Second)
	a.signal(t, syscall.SIGKILL)
	a.wait(t, 10*time.Second)
	killed := time.Now()
	bound := procTTL + recovery + time.Second
	var took time.Duration
	for {
		var by string
		for _, e := range readLog(t, c, "x") {
			if e.FenceOK && e.Proc != "A" {
				by = e.Proc
			}
		}
		took = time.Since(killed)
		if by != "" {
			t.Logf("x taken over by %s %v after A was killed (bound %v: TTL %v + recovery %v + 1s)", by, took.Round(time.Millisecond), bound, procTTL, recovery)
			break
		}
		if took > 3*bound {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if took > bound {
		bl := "?"
		if n, err := c.XLen(context.Background(), "leasebus:{signals.work}").Result(); err == nil {
			bl = fmt.Sprint(n)
		}
		t.Fatalf("x taken over %v after A was killed, want within %v (work topic length %s)", took.Round(time.Millisecond), bound, bl)
	}
	// The backlog is still there: the 20 threads are still in their runs.
	n, _ := c.Get(context.Background(), "runs").Int()
	if n > backlogThreads+2 {
		t.Fatalf("%d signal starts, want the %d running ones, x0 and its takeover", n, backlogThreads)
	}
}

// The owner of TestProcCloseHandsOver: 16 threads, each with one signal
// running (1s) and 3 queued behind it when SIGTERM comes.
const (
	closerThreads = 16
	closerQueued  = 3
)

// TestProcCloseHandsOver sends SIGTERM to the owner of 16 busy threads with
// queued signals; its handler calls Runtime.Close. Close starts no run
// (every queued signal runs on the peer), lets the running ones finish, and
// hands its wake notices over: the peer, started after the sends, starts
// every remaining signal within one recovery interval (1s, the default)
// after Close returned. Each signal runs once.
func TestProcCloseHandsOver(t *testing.T) {
	srv, c := startRedis(t)
	const recovery = time.Second
	owner := startWorker(t, srv.URL(), workerCfg{ID: "O", Mode: "closer", Delay: time.Second, NoNext: true, Recovery: recovery})
	owner.expect(t, "ready", 30*time.Second)
	owner.expect(t, "sent-all", 30*time.Second)
	peer := startWorker(t, srv.URL(), workerCfg{ID: "P", Mode: "serve", Delay: time.Millisecond, NoNext: true, Recovery: recovery})
	peer.expect(t, "ready", 30*time.Second)
	for th := range closerThreads {
		waitLog(t, c, fmt.Sprint("close", th), 1, 30*time.Second) // every thread busy
	}
	owner.signal(t, syscall.SIGTERM)
	line := owner.expect(t, "closed ", 30*time.Second)
	var closedAt int64
	var rest string
	if _, err := fmt.Sscanf(line, "closed %d %s", &closedAt, &rest); err != nil || rest != "err=<nil>" {
		t.Fatalf("owner: %q (%v), want Close to return nil", line, err)
	}
	var last time.Duration
	for i := range closerThreads * closerQueued {
		l := peer.expect(t, "started close", 30*time.Second)
		var thread, id string
		var tok uint64
		var at int64
		if _, err := fmt.Sscanf(l, "started %s %s %d %d", &thread, &id, &tok, &at); err != nil {
			t.Fatalf("peer line %d %q: %v", i, l, err)
		}
		last = max(last, time.Duration(at-closedAt))
	}
	t.Logf("the peer started the %d queued signals at most %v after Close returned (bound: recovery interval %v)",
		closerThreads*closerQueued, last.Round(time.Millisecond), recovery)
	if last > recovery {
		t.Errorf("the peer started a queued signal %v after Close returned, want within one recovery interval (%v)", last, recovery)
	}
	for th := range closerThreads {
		thread := fmt.Sprint("close", th)
		l := readLog(t, c, thread)
		runs := map[string]int{}
		for _, e := range l {
			if !e.FenceOK {
				continue
			}
			runs[e.ID]++
			first := strings.HasSuffix(e.ID, "-0")
			switch {
			case first && e.Proc != "O":
				t.Errorf("thread %s: %s ran on %s, want the owner's run", thread, e.ID, e.Proc)
			case !first && e.Proc != "P":
				t.Errorf("thread %s: queued %s ran on %s after Close began, want the peer: %+v", thread, e.ID, e.Proc, l)
			}
		}
		if len(runs) != closerQueued+1 {
			t.Errorf("thread %s: %d distinct signals ran, want %d: %+v", thread, len(runs), closerQueued+1, l)
		}
		for id, n := range runs {
			if n != 1 {
				t.Errorf("thread %s: %s ran %d times", thread, id, n)
			}
		}
	}
}
