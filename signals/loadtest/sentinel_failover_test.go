package loadtest_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

// logCount is a slog handler that counts records by level and message, for
// the figures of TestSentinelFailoverUnderLoad (the runtimes' and backends'
// warnings during a failover would flood -v output).
type logCount struct {
	mu *sync.Mutex
	n  map[string]int
}

func (h logCount) Enabled(context.Context, slog.Level) bool { return true }
func (h logCount) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.n[r.Level.String()+" "+r.Message]++
	h.mu.Unlock()
	return nil
}
func (h logCount) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h logCount) WithGroup(string) slog.Handler      { return h }

// TestSentinelFailoverUnderLoad runs three runtimes on a Sentinel deployment
// (a master and two replicas), each on its own failover client with
// go-redis's defaults and redisstreams.New, as users run them, under load
// (20 busy threads with runs of 1-3s and signals queued behind them, 80
// threads of short signals sent continuously from every runtime), and kills
// the master mid-load (redistest.Sentinel.Failover: SIGKILL, then waits for
// the promotion). Redis replicates asynchronously, so writes the old master
// acknowledged may be lost (README "Not offered", redisstreams/doc.go
// "Durability"): signals accepted before the kill may never run or run
// again unflagged, and without LeaseSyncReplicas a fencing token may be
// handed out again. Those are reported as figures. Asserted:
//
//  1. Sends work again: every Send begun more than sendBackBound after the
//     promotion returns nil, and every signal whose Send began after the
//     failover settled (Failover returned) and returned nil is given to an
//     agent, more than once only marked Redelivered. Signals accepted
//     between the kill and then are reported, not asserted: with
//     down-after-milliseconds 1000 the sentinel sometimes failed over a
//     second time, a second after the first switch (its first PING of the
//     promoted master answered late under load; see redistest's
//     sentinelDownAfter, now 2000), and the writes the deposed master took
//     in between (12-15 signals, and acks that made some run again
//     unflagged) were gone once it was made a replica: Redis's
//     asynchronous replication (README, "Not offered";
//     TestSentinelLostWritesUnderLoad shows what the replica sync options
//     change). The deployment's roles from the kill on, the sentinel's log
//     and the nodes' replication log are printed when that happens;
//  2. no thread is stuck: every thread with an accepted signal waiting at
//     the promotion (one that ran at some point: a lost one is allowed)
//     starts a run within TTL + recovery + the longest run (3s) + 2s of
//     the promotion; once sends stop, every lease is free and every inbox
//     group and the work group drain;
//  3. with LeaseSyncReplicas 1 (variant Sync): per thread, fencing tokens
//     rise strictly with run starts and no two agents run at once (the
//     variant Async reports the same figures without asserting them);
//  4. Close of each runtime returns within TTL + 1s;
//  5. in both variants, no run starts twice (the same Run.ID and token: a
//     tenure whose release failed in the failover, taken over for its run).
func TestSentinelFailoverUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("a 40s failover load test: skipped under -short")
	}
	t.Run("Async", func(t *testing.T) { sentinelFailoverUnderLoad(t, 0) })
	t.Run("Sync", func(t *testing.T) { sentinelFailoverUnderLoad(t, 1) })
}

func sentinelFailoverUnderLoad(t *testing.T, syncReplicas int) {
	st := redistest.StartSentinel(t, 2)
	ctx := context.Background()
	const (
		ttl           = 3 * time.Second
		recovery      = 500 * time.Millisecond
		busy          = 20
		perBusy       = 6
		short         = 80
		senders       = 6
		sendCtx       = 2 * time.Second
		prefix        = "sfload"
		maxRun        = 3 * time.Second
		slack         = 2 * time.Second
		sendBackBound = 5 * time.Second
		afterPromote  = 6 * time.Second
	)
	logs := logCount{mu: &sync.Mutex{}, n: map[string]int{}}
	logger := slog.New(logs)
	lg := &bhLog{given: map[string][]loadGiven{}}
	runs := startSentinelRuns(t, st, redisstreams.Options{Prefix: prefix, LeaseSyncReplicas: syncReplicas}, lg, logs, ttl, recovery)
	rts := runs.rts
	look, err := redisstreams.New(st.Client(t), redisstreams.Options{Prefix: prefix, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	defer look.Close()

	ls := newLoadSender(rts...)
	ls.warmUp(short, busy, perBusy)
	stopSends := ls.stream(senders, short, busy, sendCtx, func() int { return rand.IntN(len(rts)) })
	defer stopSends()
	time.Sleep(3 * time.Second)

	allThreads := loadThreads(busy, short)

	// The kill: when the old master stops accepting connections (Failover
	// waits for a settled master first, then kills it).
	old := st.Master().Addr()
	var killedAt atomic.Int64
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		for {
			cn, err := net.DialTimeout("tcp", old, 100*time.Millisecond)
			if err != nil {
				killedAt.Store(time.Now().UnixNano())
				return
			}
			cn.Close()
			time.Sleep(2 * time.Millisecond)
		}
	}()
	failStart := time.Now()
	roles := watchRoles(st.SentinelAddrs()[0], st.Nodes(), failStart)
	st.Failover(t)
	promoted := time.Now()
	<-watchDone
	// The test assumes one failover: the sentinel must keep reporting the
	// master Failover settled on. Under load, with down-after-milliseconds
	// 1000, it was seen to move the master again (a spurious failover, see
	// point 1 above; Sends then failed for seconds after Failover
	// returned); the test then skips, with what it saw.
	newMaster := st.Master().Addr()
	sc := redis.NewSentinelClient(&redis.Options{Addr: st.SentinelAddrs()[0]})
	defer sc.Close()
	var movedTo atomic.Value
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go func() {
		for watchCtx.Err() == nil {
			if a, err := sc.GetMasterAddrByName(watchCtx, st.MasterName()).Result(); err == nil && len(a) == 2 {
				if addr := net.JoinHostPort(a[0], a[1]); addr != newMaster {
					movedTo.CompareAndSwap(nil, fmt.Sprintf("%s at %+.3fs from the promotion", addr, time.Since(promoted).Seconds()))
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	killed := time.Unix(0, killedAt.Load())
	time.Sleep(afterPromote)
	stopSends()
	sendsEnd := time.Now()
	roleLog := roles()
	switches := strings.Count(st.Log(), "+switch-master")
	if m := movedTo.Load(); m != nil {
		t.Logf("the deployment's roles from the Failover call:\n%s\n%s", roleLog, nodeLogs(st))
		t.Skipf("premise: the sentinel moved the master again after Failover settled on %s (to %s); this test assumes one failover", newMaster, m)
	}

	all := ls.all()
	sendProc := ls.proc // (the senders have stopped)
	accepted := map[string]loadSend{}
	var failed, failedAfterBound, afterKill, beforeKill, duringFO, postProm int
	firstOK := map[string]time.Time{}
	var lastFailStart time.Time
	for _, s := range all {
		if s.err == nil {
			accepted[s.id] = s
		} else {
			failed++
			if s.start.After(lastFailStart) {
				lastFailStart = s.start
			}
		}
		if s.err == nil && s.start.After(promoted) {
			p := sendProc[s.id]
			if f, ok := firstOK[p]; !ok || s.end.Before(f) {
				firstOK[p] = s.end
			}
		}
		if s.start.After(promoted.Add(sendBackBound)) && s.err != nil {
			failedAfterBound++
			if failedAfterBound <= 10 {
				t.Errorf("Send of %s to %s by %s, begun %v after the promotion, failed: %v", s.id, s.thread, sendProc[s.id], s.start.Sub(promoted).Round(time.Millisecond), s.err)
			}
		}
		if s.err != nil {
			continue
		}
		switch {
		case s.start.After(promoted):
			postProm++
			afterKill++
		case s.start.After(killed):
			duringFO++
			afterKill++
		default:
			beforeKill++
		}
	}
	for _, rt := range rts {
		if _, ok := firstOK[rt.ProcessID()]; !ok {
			t.Errorf("no Send by %s begun after the promotion returned nil", rt.ProcessID())
		}
	}

	// 1. Every signal accepted after the kill is given.
	lg.waitGiven(t, accepted, sendProc, func(s loadSend) bool { return s.start.After(promoted) }, promoted, "the promotion", sendsEnd.Add(60*time.Second))
	// Accepted between the kill and the settled promotion: reported.
	var lostUnsettled []string
	lg.mu.Lock()
	for id, s := range accepted {
		if s.start.After(killed) && !s.start.After(promoted) && len(lg.given[id]) == 0 {
			lostUnsettled = append(lostUnsettled, fmt.Sprintf("%s(%s, sent %+.3fs from the promotion)", id, s.thread, s.start.Sub(promoted).Seconds()))
		}
	}
	lg.mu.Unlock()
	if len(lostUnsettled) > 0 {
		sort.Strings(lostUnsettled)
		t.Logf("%d signals accepted between the kill and the settled promotion never given (the sentinel switched the master %d times): %v; the deployment's roles from the Failover call (kill %+.3fs, settled %+.3fs):\n%s\nthe sentinel's log:\n%s\n%s",
			len(lostUnsettled), switches, lostUnsettled[:min(len(lostUnsettled), 20)], killed.Sub(failStart).Seconds(), promoted.Sub(failStart).Seconds(), roleLog, st.Log(), nodeLogs(st))
	}
	allGiven := time.Now()

	// 2b. Nothing stuck: no lease held, inboxes and the work group drained.
	checkSettled(t, look, allThreads, 30*time.Second)
	settled := time.Since(allGiven)

	// 4. Close.
	closeTimes := runs.closeAll(t, ttl)

	lg.mu.Lock()
	defer lg.mu.Unlock()
	// 3. Overlaps and tokens.
	byThread := lg.byThread()
	overlaps, tokenRepeat, tokenBack, sameRun := 0, 0, 0, 0
	var anomalies []string
	for th, rs := range byThread {
		ov := runOverlaps(th, rs, promoted, "the promotion")
		overlaps += len(ov)
		anomalies = append(anomalies, ov...)
		for i, r := range rs {
			if i+1 < len(rs) {
				q := rs[i+1]
				if q.id == r.id && q.proc == r.proc {
					// The same run started again: a tenure whose release
					// failed was taken over "for that run" (givenup.go),
					// keeping its owner and token, until adopt released
					// such a lease for a new run (10-34 per Sync run before).
					sameRun++
					if sameRun <= 3 {
						t.Errorf("run %s on %s of %s (token %d) started again %+.3fs from the promotion (first %+.3fs, ended %+.3fs)",
							q.id, q.proc, th, q.token, q.start.Sub(promoted).Seconds(), r.start.Sub(promoted).Seconds(), r.end.Sub(promoted).Seconds())
					}
				} else if q.token <= r.token {
					if q.token == r.token {
						tokenRepeat++
					} else {
						tokenBack++
					}
					anomalies = append(anomalies, fmt.Sprintf("%s: run %s on %s (token %d, started %+.3fs from the promotion) after run %s on %s (token %d, started %+.3fs)",
						th, q.id, q.proc, q.token, q.start.Sub(promoted).Seconds(), r.id, r.proc, r.token, r.start.Sub(promoted).Seconds()))
				}
			}
		}
	}
	if syncReplicas > 0 {
		for _, s := range anomalies[:min(len(anomalies), 10)] {
			t.Errorf("with LeaseSyncReplicas %d: %s", syncReplicas, s)
		}
	} else {
		for _, s := range anomalies[:min(len(anomalies), 10)] {
			t.Logf("allowed without LeaseSyncReplicas: %s", s)
		}
	}

	// 1b. Duplicates: of signals accepted after the settled promotion only
	// flagged ones; before it, reported.
	givenAfter := map[string][]loadGiven{}
	var lost, lostDuring, dupBeforeFlagged, dupBeforeUnflagged, redeliveredAny int
	var unflaggedBefore []string
	for id, s := range accepted {
		gs := lg.given[id]
		for _, g := range gs {
			if g.redelivered {
				redeliveredAny++
				break
			}
		}
		if s.start.After(promoted) {
			givenAfter[id] = gs
			continue
		}
		if len(gs) == 0 {
			lost++
			if s.end.After(killed) {
				lostDuring++
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
			dupBeforeUnflagged++
			unflaggedBefore = append(unflaggedBefore, fmt.Sprintf("%s(%s, sent %+.3fs, %+v)", id, s.thread, s.start.Sub(promoted).Seconds(), gs))
		case len(gs) > 1:
			dupBeforeFlagged++
		}
	}
	dupFlagged, dupUnflagged := checkGivenOnce(t, givenAfter)

	// 2a. Every thread with work waiting at the promotion runs within the
	// bound.
	takeBound := ttl + recovery + maxRun + slack
	var firstRuns []time.Duration
	var slowest time.Duration
	var slowDesc string
	for _, th := range allThreads {
		waiting := false
		for id, s := range accepted {
			if s.thread != th || !s.start.Before(promoted) {
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
		for _, r := range byThread[th] {
			if !r.start.Before(promoted) {
				first = r
				break
			}
		}
		if first == nil {
			t.Errorf("thread %s had work waiting at the promotion and never ran after it", th)
			continue
		}
		d := first.start.Sub(promoted)
		firstRuns = append(firstRuns, d)
		if d > slowest {
			slowest, slowDesc = d, fmt.Sprintf("%s on %s token %d", th, first.proc, first.token)
		}
		if d > takeBound {
			t.Errorf("thread %s with work waiting at the promotion first ran %v after it (on %s), bound %v", th, d.Round(time.Millisecond), first.proc, takeBound)
		}
	}
	sort.Slice(firstRuns, func(i, j int) bool { return firstRuns[i] < firstRuns[j] })
	pct := func(p float64) time.Duration {
		if len(firstRuns) == 0 {
			return 0
		}
		return firstRuns[min(len(firstRuns)-1, int(p*float64(len(firstRuns))))].Round(time.Millisecond)
	}
	var runsCancelled int
	for _, r := range lg.runs {
		if r.cancelled && r.end.After(killed) && r.end.Before(promoted.Add(ttl)) {
			runsCancelled++
		}
	}

	var sendBack []string
	for _, rt := range rts {
		p := rt.ProcessID()
		sendBack = append(sendBack, fmt.Sprintf("%s %v", p, firstOK[p].Sub(promoted).Round(time.Millisecond)))
	}
	t.Logf("LeaseSyncReplicas %d: Failover %v (kill %+.3fs from its call, promotion %v after the kill)",
		syncReplicas, promoted.Sub(failStart).Round(time.Millisecond), killed.Sub(failStart).Seconds(), promoted.Sub(killed).Round(time.Millisecond))
	t.Logf("sends %d, failed %d (last failing one begun %+.3fs from the promotion); first Send ok after the promotion: %s",
		len(all), failed, lastFailStart.Sub(promoted).Seconds(), strings.Join(sendBack, ", "))
	t.Logf("accepted: %d before the kill, %d between the kill and the promotion, %d after the promotion",
		beforeKill, duringFO, postProm)
	t.Logf("accepted before the promotion: %d never given (lost; %d of them returned after the kill), %d given twice flagged, %d given twice unflagged %v",
		lost, lostDuring, dupBeforeFlagged, dupBeforeUnflagged, unflaggedBefore[:min(len(unflaggedBefore), 10)])
	t.Logf("accepted after the promotion: %d given twice flagged Redelivered, %d unflagged; signals given Redelivered at least once: %d",
		dupFlagged, dupUnflagged, redeliveredAny)
	t.Logf("runs %d; cancelled around the failover %d; overlaps %d; tokens repeated %d, backwards %d; a run started again under its ID and token %d",
		len(lg.runs), runsCancelled, overlaps, tokenRepeat, tokenBack, sameRun)
	t.Logf("threads with work waiting at the promotion: %d, first run after it: min %v, median %v, p90 %v, max %v (%s; bound %v)",
		len(firstRuns), pct(0), pct(0.5), pct(0.9), pct(1), slowDesc, takeBound)
	t.Logf("the sentinel switched the master %d times; the deployment's roles from the Failover call:\n%s", switches, roleLog)
	t.Logf("all given %v after the senders stopped; settled %v after that; Close %v", allGiven.Sub(sendsEnd).Round(time.Millisecond), settled.Round(time.Millisecond), closeTimes)
	logTop(t, logs, 8)
}

// watchRoles polls, every 20ms from now, the sentinel's reported master and
// each node's ROLE (with the master it follows), and returns a func that
// stops the polling and returns the changes, timed from start: the evidence
// of which node took writes when, for a failover that lost some.
// (The addresses are taken before: Failover holds the Sentinel's lock.)
func watchRoles(sentinel string, nodes []*redistest.Server, start time.Time) func() string {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var lines []string
	go func() {
		defer close(done)
		sc := redis.NewSentinelClient(&redis.Options{Addr: sentinel, DialTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond})
		defer sc.Close()
		var ncs []*redis.Client
		for _, n := range nodes {
			ncs = append(ncs, redis.NewClient(&redis.Options{Addr: n.Addr(), DialTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond, MaxRetries: -1, PoolSize: 1}))
		}
		defer func() {
			for _, c := range ncs {
				c.Close()
			}
		}()
		last := ""
		for ctx.Err() == nil {
			var b strings.Builder
			if a, err := sc.GetMasterAddrByName(ctx, redistest.SentinelMasterName).Result(); err == nil && len(a) == 2 {
				fmt.Fprintf(&b, "sentinel: %s;", net.JoinHostPort(a[0], a[1]))
			} else {
				fmt.Fprintf(&b, "sentinel: %v;", err)
			}
			for _, c := range ncs {
				v, err := c.Do(ctx, "ROLE").Slice()
				switch {
				case err != nil:
					fmt.Fprintf(&b, " %s down;", c.Options().Addr)
				case len(v) >= 4 && v[0] == "slave":
					fmt.Fprintf(&b, " %s slave of :%v (%v);", c.Options().Addr, v[2], v[3])
				case len(v) >= 1:
					fmt.Fprintf(&b, " %s %v;", c.Options().Addr, v[0])
				}
			}
			if s := b.String(); s != last {
				lines = append(lines, fmt.Sprintf("%+.3fs %s", time.Since(start).Seconds(), s))
				last = s
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	return func() string {
		cancel()
		<-done
		return strings.Join(lines, "\n")
	}
}

// nodeLogs returns the replication lines of every node's log.
func nodeLogs(st *redistest.Sentinel) string {
	var b strings.Builder
	for _, n := range st.Nodes() {
		fmt.Fprintf(&b, "--- %s ---\n", n.Addr())
		for _, l := range strings.Split(n.Log(), "\n") {
			if strings.Contains(l, "MASTER") || strings.Contains(l, "REPLICA") || strings.Contains(l, "eplica") || strings.Contains(l, "SYNC") || strings.Contains(l, "sync") {
				b.WriteString(l)
				b.WriteByte('\n')
			}
		}
	}
	return b.String()
}

// sentinelRuns is the three runtimes "A", "B" and "C" of a Sentinel load
// test, each on its own failover client with go-redis's defaults and
// redisstreams.New with opts, logging to logs and recording into lg.
type sentinelRuns struct {
	rts    []*signals.Runtime
	bes    []*redisstreams.Backend
	closed bool
}

// startSentinelRuns starts them; t.Cleanup closes them unless closeAll did.
func startSentinelRuns(t *testing.T, st *redistest.Sentinel, opts redisstreams.Options, lg *bhLog, logs logCount, ttl, recovery time.Duration) *sentinelRuns {
	logger := slog.New(logs)
	opts.Logger = logger
	s := &sentinelRuns{}
	for _, id := range []string{"A", "B", "C"} {
		b, err := redisstreams.New(st.Client(t), opts)
		if err != nil {
			t.Fatal(err)
		}
		rt, err := signals.New(b, lg.agent(id), signals.WithProcessID(id), signals.WithLogger(logger),
			signals.WithLeaseTTL(ttl), signals.WithRecoveryInterval(recovery))
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
func (s *sentinelRuns) closeAll(t *testing.T, ttl time.Duration) []time.Duration {
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
