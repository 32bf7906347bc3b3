package loadtest_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

// What the load tests with a fault (TestBlackHoleOneRuntimeUnderLoad,
// TestSentinelFailoverUnderLoad, TestSentinelLostWritesUnderLoad,
// TestClusterFailoverUnderLoad) share: the agent's record of runs and
// deliveries, the checks that every accepted signal was given and that
// nothing stays stuck, and for the failover tests their runtimes and the
// checks of sends and runs around the promotion. Their sends go through
// loadSender (late_load_test.go).

// bhRun is one run of the agent as the agent saw it.
type bhRun struct {
	proc, thread, id string
	token            uint64
	start, end       time.Time // end: the agent saw its ctx end, or returned
	cancelled        bool
	sigs             []string
}

// bhLog records the runs and the deliveries of a load test
// (TestBlackHoleOneRuntimeUnderLoad, TestSentinelFailoverUnderLoad).
type bhLog struct {
	mu    sync.Mutex
	runs  []*bhRun
	given map[string][]loadGiven
}

// agent records each run and its signals, and runs busy-* threads' runs
// 1-3s, the others' 0-5ms, or until the run's ctx ends.
func (l *bhLog) agent(proc string) signals.Agent {
	return func(ctx context.Context, r *signals.Run) error {
		now := time.Now()
		run := &bhRun{proc: proc, thread: r.Thread, id: r.ID, token: r.Token, start: now}
		l.mu.Lock()
		l.runs = append(l.runs, run)
		for i, s := range r.Signals {
			red := i < len(r.Redelivered) && r.Redelivered[i]
			l.given[s.ID] = append(l.given[s.ID], loadGiven{at: now, redelivered: red, proc: proc})
			run.sigs = append(run.sigs, s.ID)
		}
		l.mu.Unlock()
		d := time.Duration(rand.IntN(5)) * time.Millisecond
		if strings.HasPrefix(r.Thread, "busy-") {
			d = time.Second + time.Duration(rand.IntN(2000))*time.Millisecond
		}
		t := time.NewTimer(d)
		defer t.Stop()
		cancelled := false
		select {
		case <-t.C:
		case <-ctx.Done():
			cancelled = true
		}
		end := time.Now()
		l.mu.Lock()
		run.end, run.cancelled = end, cancelled
		l.mu.Unlock()
		return nil
	}
}

// byThread returns l's runs per thread, by start time. l.mu is held.
func (l *bhLog) byThread() map[string][]*bhRun {
	m := map[string][]*bhRun{}
	for _, r := range l.runs {
		m[r.thread] = append(m[r.thread], r)
	}
	for _, rs := range m {
		sort.Slice(rs, func(i, j int) bool { return rs[i].start.Before(rs[j].start) })
	}
	return m
}

// runOverlaps describes each pair of thread's runs rs (by start time) that
// ran at once (a run lasts until its agent saw its ctx end or returned;
// one not over yet, until now), with times from ref, named refName.
func runOverlaps(thread string, rs []*bhRun, ref time.Time, refName string) []string {
	var out []string
	for i, r := range rs {
		end := r.end
		if end.IsZero() {
			end = time.Now()
		}
		for _, q := range rs[i+1:] {
			if q.start.Before(end) {
				out = append(out, fmt.Sprintf("%s: run %s on %s (token %d, %+.3fs..%+.3fs from %s, cancelled=%v) and run %s on %s (token %d, started %+.3fs) at once",
					thread, r.id, r.proc, r.token, r.start.Sub(ref).Seconds(), end.Sub(ref).Seconds(), refName, r.cancelled, q.id, q.proc, q.token, q.start.Sub(ref).Seconds()))
			}
		}
	}
	return out
}

// waitGiven waits until every signal of accepted that want picks was given
// to an agent, and fails t with the first 30 missing (their sender from
// sendProc, their send time from ref, named refName) if some were not by
// deadline.
func (l *bhLog) waitGiven(t *testing.T, accepted map[string]loadSend, sendProc map[string]string, want func(loadSend) bool, ref time.Time, refName string, deadline time.Time) {
	t.Helper()
	for {
		var missing []string
		l.mu.Lock()
		for id, s := range accepted {
			if want(s) && len(l.given[id]) == 0 {
				missing = append(missing, fmt.Sprintf("%s(%s by %s, sent %+.3fs from %s)", id, s.thread, sendProc[id], s.start.Sub(ref).Seconds(), refName))
			}
		}
		l.mu.Unlock()
		if len(missing) == 0 {
			return
		}
		if time.Now().After(deadline) {
			sort.Strings(missing)
			t.Errorf("%d accepted signals never given by the deadline: %v", len(missing), missing[:min(len(missing), 30)])
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// loadThreads returns the names of a load's threads: busy-0.. and short-0...
func loadThreads(busy, short int) []string {
	var ths []string
	for i := range busy {
		ths = append(ths, fmt.Sprint("busy-", i))
	}
	for i := range short {
		ths = append(ths, fmt.Sprint("short-", i))
	}
	return ths
}

// checkSettled waits up to bound until nothing of threads stays stuck (no
// lease held, every inbox group and the work group without pending or
// unread entries), and fails t with what is left otherwise.
func checkSettled(t *testing.T, look *redisstreams.Backend, threads []string, bound time.Duration) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(bound)
	var left []string
	for {
		left = left[:0]
		for _, th := range threads {
			o, err := look.GetLeaseOwner(ctx, signals.LeaseKey(th))
			if err != nil {
				t.Fatal(err)
			}
			if o != "" {
				left = append(left, fmt.Sprintf("lease of %s held by %s", th, o))
			}
			bl, err := look.GroupBacklog(ctx, signals.InboxTopic(th), signals.InboxGroup)
			if err != nil {
				t.Fatal(err)
			}
			if bl.Pending != 0 || bl.Lag != 0 {
				left = append(left, fmt.Sprintf("inbox of %s: %d pending, %d unread", th, bl.Pending, bl.Lag))
			}
		}
		bl, err := look.GroupBacklog(ctx, signals.WorkTopic, signals.WorkGroup)
		if err != nil {
			t.Fatal(err)
		}
		if bl.Pending != 0 || bl.Lag != 0 {
			left = append(left, fmt.Sprintf("work group: %d pending, %d unread", bl.Pending, bl.Lag))
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%v after every signal was given, still stuck (%d): %v", bound, len(left), left[:min(len(left), 20)])
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// logCount is a slog handler that counts records by level and message, for
// the figures of the failover load tests (the runtimes' and backends'
// warnings during a failover would flood -v output).
type logCount struct {
	mu *sync.Mutex
	n  map[string]int
}

func newLogCount() logCount { return logCount{mu: &sync.Mutex{}, n: map[string]int{}} }

func (h logCount) Enabled(context.Context, slog.Level) bool { return true }
func (h logCount) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.n[r.Level.String()+" "+r.Message]++
	h.mu.Unlock()
	return nil
}
func (h logCount) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h logCount) WithGroup(string) slog.Handler      { return h }

// logTop logs the n most frequent log records counted by logs.
func logTop(t *testing.T, logs logCount, n int) {
	t.Helper()
	logs.mu.Lock()
	type kv struct {
		k string
		n int
	}
	var lk []kv
	for k, v := range logs.n {
		lk = append(lk, kv{k, v})
	}
	logs.mu.Unlock()
	sort.Slice(lk, func(i, j int) bool { return lk[i].n > lk[j].n })
	for _, x := range lk[:min(len(lk), n)] {
		t.Logf("log %5d× %s", x.n, x.k)
	}
}

// loadRuns is the three runtimes "A", "B" and "C" of a failover load test,
// each on its own client from newClient (one with go-redis's defaults, as
// users build it) and redisstreams.New with opts, logging to logs and
// recording into lg.
type loadRuns struct {
	rts    []*signals.Runtime
	bes    []*redisstreams.Backend
	closed bool
}

// startLoadRuns starts them, each with extra options after the test's
// own; t.Cleanup closes them unless closeAll did.
func startLoadRuns(t *testing.T, newClient func() redis.UniversalClient, opts redisstreams.Options, lg *bhLog, logs logCount, ttl, recovery time.Duration, extra ...signals.Option) *loadRuns {
	logger := slog.New(logs)
	opts.Logger = logger
	s := &loadRuns{}
	for _, id := range []string{"A", "B", "C"} {
		b, err := redisstreams.New(newClient(), opts)
		if err != nil {
			t.Fatal(err)
		}
		rt, err := signals.New(b, lg.agent(id), append([]signals.Option{signals.WithProcessID(id), signals.WithLogger(logger),
			signals.WithLeaseTTL(ttl), signals.WithRecoveryInterval(recovery)}, extra...)...)
		if err != nil {
			t.Fatal(err)
		}
		s.rts, s.bes = append(s.rts, rt), append(s.bes, b)
	}
	t.Cleanup(func() {
		if s.closed {
			return
		}
		for i := range s.rts {
			cctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			_ = s.rts[i].Close(cctx)
			cancel()
			_ = s.bes[i].Close()
		}
	})
	return s
}

// closeAll closes each runtime with a 10s ctx, fails t when a Close returns
// an error or takes longer than ttl + 1s, and returns how long each took.
func (s *loadRuns) closeAll(t *testing.T, ttl time.Duration) []time.Duration {
	t.Helper()
	var took []time.Duration
	for i, rt := range s.rts {
		c0 := time.Now()
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := rt.Close(cctx)
		cancel()
		d := time.Since(c0)
		took = append(took, d.Round(time.Millisecond))
		if err != nil {
			t.Errorf("%s's Close: %v", rt.ProcessID(), err)
		}
		if d > ttl+time.Second {
			t.Errorf("%s's Close took %v, want at most TTL + 1s", rt.ProcessID(), d.Round(time.Millisecond))
		}
		_ = s.bes[i].Close()
	}
	s.closed = true
	return took
}

// foSends is the sends of a failover load test (TestSentinelFailoverUnderLoad,
// TestClusterFailoverUnderLoad) sorted around the kill and the promotion.
type foSends struct {
	all      []loadSend
	proc     map[string]string   // signal ID → the runtime that sent it
	accepted map[string]loadSend // the Sends that returned nil
	failed   int
	// of the failed ones, how many began more than the bound after the
	// promotion, and when the last failing one began
	failedAfterBound int
	lastFailStart    time.Time
	// accepted ones begun before the kill, between it and the promotion,
	// after the promotion
	beforeKill, duringFO, postProm int
	// per runtime, when its first Send begun after the promotion that
	// returned nil returned
	firstOK map[string]time.Time
	// the end of the first Send begun after the promotion that returned nil
	firstAny time.Time
}

// checkSendsBack reads the sends of ls (whose senders have stopped) and
// fails t for each Send begun more than bound after promoted that failed
// (the first 10 named), and for each runtime of rts none of whose Sends
// begun after promoted returned nil.
func checkSendsBack(t *testing.T, ls *loadSender, rts []*signals.Runtime, killed, promoted time.Time, bound time.Duration) *foSends {
	t.Helper()
	s := &foSends{all: ls.all(), proc: ls.proc, accepted: map[string]loadSend{}, firstOK: map[string]time.Time{}}
	for _, x := range s.all {
		if x.err == nil {
			s.accepted[x.id] = x
		} else {
			s.failed++
			if x.start.After(s.lastFailStart) {
				s.lastFailStart = x.start
			}
		}
		if x.err == nil && x.start.After(promoted) {
			p := s.proc[x.id]
			if f, ok := s.firstOK[p]; !ok || x.end.Before(f) {
				s.firstOK[p] = x.end
			}
			if s.firstAny.IsZero() || x.end.Before(s.firstAny) {
				s.firstAny = x.end
			}
		}
		if x.start.After(promoted.Add(bound)) && x.err != nil {
			s.failedAfterBound++
			if s.failedAfterBound <= 10 {
				t.Errorf("Send of %s to %s by %s, begun %v after the promotion, failed: %v", x.id, x.thread, s.proc[x.id], x.start.Sub(promoted).Round(time.Millisecond), x.err)
			}
		}
		if x.err != nil {
			continue
		}
		switch {
		case x.start.After(promoted):
			s.postProm++
		case x.start.After(killed):
			s.duringFO++
		default:
			s.beforeKill++
		}
	}
	for _, rt := range rts {
		if _, ok := s.firstOK[rt.ProcessID()]; !ok {
			t.Errorf("no Send by %s begun after the promotion returned nil", rt.ProcessID())
		}
	}
	return s
}

// lostBetween returns the signals accepted from Sends begun between killed
// and promoted that lg never saw given, each with its thread and send time.
func (s *foSends) lostBetween(lg *bhLog, killed, promoted time.Time) []string {
	var lost []string
	lg.mu.Lock()
	defer lg.mu.Unlock()
	for id, x := range s.accepted {
		if x.start.After(killed) && !x.start.After(promoted) && len(lg.given[id]) == 0 {
			lost = append(lost, fmt.Sprintf("%s(%s, sent %+.3fs from the promotion)", id, x.thread, x.start.Sub(promoted).Seconds()))
		}
	}
	sort.Strings(lost)
	return lost
}

// foRuns is what the agents of a failover load test saw, checked by
// checkFailoverRuns.
type foRuns struct {
	byThread map[string][]*bhRun
	// runs of a thread at once; later runs with a token not above an
	// earlier one's (the same, lower); runs started again under the same
	// ID and token; each overlap and token out of order, described
	overlaps, tokenRepeat, tokenBack, sameRun int
	anomalies                                 []string
	// of the signals accepted before the promotion: never given, of those
	// how many Sends returned after the kill, given twice all but once
	// flagged Redelivered, given twice unflagged (described)
	lost, lostDuring, dupBeforeFlagged, dupBeforeUnflagged int
	unflaggedBefore                                        []string
	// of those accepted after it: given twice flagged, unflagged
	dupFlagged, dupUnflagged int
	// signals given Redelivered at least once
	redeliveredAny int
	// per thread with work waiting at the promotion, its first run's start
	// after it (sorted), and the slowest
	firstRuns []time.Duration
	slowest   time.Duration
	slowDesc  string
	// runs in all; cancelled between the kill and a TTL after the promotion
	runs, runsCancelled int
}

// checkFailoverRuns checks the runs lg recorded in a failover load test
// with the threads threads, whose Sends s sorted, and fails t:
//
//   - when a run starts again under the same ID on the same runtime (a
//     tenure whose release failed in the failover, taken over for its run);
//   - for each signal accepted after the promotion and given twice
//     without the Redelivered flag (checkGivenOnce);
//   - for each thread with an accepted signal waiting at the promotion (one
//     given, but first after it: a lost one is allowed) that starts no run
//     within takeBound of the promotion.
//
// Overlaps and tokens that do not rise are returned in anomalies, for the
// caller to assert or report. lg.mu is held.
func checkFailoverRuns(t *testing.T, lg *bhLog, s *foSends, threads []string, killed, promoted time.Time, ttl, takeBound time.Duration) *foRuns {
	t.Helper()
	r := &foRuns{byThread: lg.byThread(), runs: len(lg.runs)}
	for th, rs := range r.byThread {
		ov := runOverlaps(th, rs, promoted, "the promotion")
		r.overlaps += len(ov)
		r.anomalies = append(r.anomalies, ov...)
		for i, x := range rs {
			if i+1 >= len(rs) {
				continue
			}
			q := rs[i+1]
			if q.id == x.id && q.proc == x.proc {
				// The same run started again: a tenure whose release
				// failed was taken over "for that run" (givenup.go),
				// keeping its owner and token, until adopt released
				// such a lease for a new run (10-34 per Sync run before).
				r.sameRun++
				if r.sameRun <= 3 {
					t.Errorf("run %s on %s of %s (token %d) started again %+.3fs from the promotion (first %+.3fs, ended %+.3fs)",
						q.id, q.proc, th, q.token, q.start.Sub(promoted).Seconds(), x.start.Sub(promoted).Seconds(), x.end.Sub(promoted).Seconds())
				}
			} else if q.token <= x.token {
				if q.token == x.token {
					r.tokenRepeat++
				} else {
					r.tokenBack++
				}
				r.anomalies = append(r.anomalies, fmt.Sprintf("%s: run %s on %s (token %d, started %+.3fs from the promotion) after run %s on %s (token %d, started %+.3fs)",
					th, q.id, q.proc, q.token, q.start.Sub(promoted).Seconds(), x.id, x.proc, x.token, x.start.Sub(promoted).Seconds()))
			}
		}
	}

	// Duplicates: of signals accepted after the promotion only flagged
	// ones; before it, reported.
	givenAfter := map[string][]loadGiven{}
	for id, x := range s.accepted {
		gs := lg.given[id]
		for _, g := range gs {
			if g.redelivered {
				r.redeliveredAny++
				break
			}
		}
		if x.start.After(promoted) {
			givenAfter[id] = gs
			continue
		}
		if len(gs) == 0 {
			r.lost++
			if x.end.After(killed) {
				r.lostDuring++
			}
			continue
		}
		fresh := 0
		for _, g := range gs {
			if !g.redelivered {
				fresh++
			}
		}
		switch {
		case fresh > 1:
			r.dupBeforeUnflagged++
			r.unflaggedBefore = append(r.unflaggedBefore, fmt.Sprintf("%s(%s, sent %+.3fs, %+v)", id, x.thread, x.start.Sub(promoted).Seconds(), gs))
		case len(gs) > 1:
			r.dupBeforeFlagged++
		}
	}
	r.dupFlagged, r.dupUnflagged = checkGivenOnce(t, givenAfter)

	// Every thread with work waiting at the promotion runs within the
	// bound.
	for _, th := range threads {
		waiting := false
		for id, x := range s.accepted {
			if x.thread != th || !x.start.Before(promoted) {
				continue
			}
			gs := lg.given[id]
			if len(gs) > 0 && !gs[0].at.Before(promoted) {
				waiting = true // ran, but only after the promotion
				break
			}
		}
		if !waiting {
			continue
		}
		var first *bhRun
		for _, x := range r.byThread[th] {
			if !x.start.Before(promoted) {
				first = x
				break
			}
		}
		if first == nil {
			t.Errorf("thread %s had work waiting at the promotion and never ran after it", th)
			continue
		}
		d := first.start.Sub(promoted)
		r.firstRuns = append(r.firstRuns, d)
		if d > r.slowest {
			r.slowest, r.slowDesc = d, fmt.Sprintf("%s on %s token %d", th, first.proc, first.token)
		}
		if d > takeBound {
			t.Errorf("thread %s with work waiting at the promotion first ran %v after it (on %s), bound %v", th, d.Round(time.Millisecond), first.proc, takeBound)
		}
	}
	slices.Sort(r.firstRuns)
	for _, x := range lg.runs {
		if x.cancelled && x.end.After(killed) && x.end.Before(promoted.Add(ttl)) {
			r.runsCancelled++
		}
	}
	return r
}

// firstRunPct returns the p-th quantile of r.firstRuns, rounded to 1ms.
func (r *foRuns) firstRunPct(p float64) time.Duration {
	if len(r.firstRuns) == 0 {
		return 0
	}
	return r.firstRuns[min(len(r.firstRuns)-1, int(p*float64(len(r.firstRuns))))].Round(time.Millisecond)
}

// logFailoverFigures logs what a failover load test measured: s's sends,
// r's runs, and the time the given signals, the settling and each Close
// took.
func logFailoverFigures(t *testing.T, s *foSends, r *foRuns, rts []*signals.Runtime, promoted time.Time, takeBound time.Duration) {
	t.Helper()
	var sendBack []string
	for _, rt := range rts {
		p := rt.ProcessID()
		sendBack = append(sendBack, fmt.Sprintf("%s %v", p, s.firstOK[p].Sub(promoted).Round(time.Millisecond)))
	}
	t.Logf("sends %d, failed %d (last failing one begun %+.3fs from the promotion); first Send ok after the promotion: %s",
		len(s.all), s.failed, s.lastFailStart.Sub(promoted).Seconds(), strings.Join(sendBack, ", "))
	t.Logf("accepted: %d before the kill, %d between the kill and the promotion, %d after the promotion",
		s.beforeKill, s.duringFO, s.postProm)
	t.Logf("accepted before the promotion: %d never given (lost; %d of them returned after the kill), %d given twice flagged, %d given twice unflagged %v",
		r.lost, r.lostDuring, r.dupBeforeFlagged, r.dupBeforeUnflagged, r.unflaggedBefore[:min(len(r.unflaggedBefore), 10)])
	t.Logf("accepted after the promotion: %d given twice flagged Redelivered, %d unflagged; signals given Redelivered at least once: %d",
		r.dupFlagged, r.dupUnflagged, r.redeliveredAny)
	t.Logf("runs %d; cancelled around the failover %d; overlaps %d; tokens repeated %d, backwards %d; a run started again under its ID and token %d",
		r.runs, r.runsCancelled, r.overlaps, r.tokenRepeat, r.tokenBack, r.sameRun)
	t.Logf("threads with work waiting at the promotion: %d, first run after it: min %v, median %v, p90 %v, max %v (%s; bound %v)",
		len(r.firstRuns), r.firstRunPct(0), r.firstRunPct(0.5), r.firstRunPct(0.9), r.firstRunPct(1), r.slowDesc, takeBound)
}
