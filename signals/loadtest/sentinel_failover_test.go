package loadtest_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/redisstreams"
)

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
	logs := newLogCount()
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

	fs := checkSendsBack(t, ls, rts, killed, promoted, sendBackBound)
	sendProc, accepted := fs.proc, fs.accepted

	// 1. Every signal accepted after the kill is given.
	lg.waitGiven(t, accepted, sendProc, func(s loadSend) bool { return s.start.After(promoted) }, promoted, "the promotion", sendsEnd.Add(60*time.Second))
	// Accepted between the kill and the settled promotion: reported.
	lostUnsettled := fs.lostBetween(lg, killed, promoted)
	if len(lostUnsettled) > 0 {
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
	// 1b (duplicates), 2a (every thread with work waiting at the promotion
	// runs within the bound), 5 (no run starts twice); 3. overlaps and
	// tokens.
	takeBound := ttl + recovery + maxRun + slack
	fr := checkFailoverRuns(t, lg, fs, allThreads, killed, promoted, ttl, takeBound)
	if syncReplicas > 0 {
		for _, s := range fr.anomalies[:min(len(fr.anomalies), 10)] {
			t.Errorf("with LeaseSyncReplicas %d: %s", syncReplicas, s)
		}
	} else {
		for _, s := range fr.anomalies[:min(len(fr.anomalies), 10)] {
			t.Logf("allowed without LeaseSyncReplicas: %s", s)
		}
	}

	t.Logf("LeaseSyncReplicas %d: Failover %v (kill %+.3fs from its call, promotion %v after the kill)",
		syncReplicas, promoted.Sub(failStart).Round(time.Millisecond), killed.Sub(failStart).Seconds(), promoted.Sub(killed).Round(time.Millisecond))
	logFailoverFigures(t, fs, fr, rts, promoted, takeBound)
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

// startSentinelRuns starts the three runtimes of a Sentinel load test on
// st, each on its own failover client with go-redis's defaults
// (startLoadRuns).
func startSentinelRuns(t *testing.T, st *redistest.Sentinel, opts redisstreams.Options, lg *bhLog, logs logCount, ttl, recovery time.Duration) *loadRuns {
	return startLoadRuns(t, func() redis.UniversalClient { return st.Client(t) }, opts, lg, logs, ttl, recovery)
}
