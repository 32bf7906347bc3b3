package loadtest_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/keys"
	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

// TestClusterFailoverUnderLoad is TestSentinelFailoverUnderLoad on a Redis
// Cluster of 3 masters, each with a replica (cluster-node-timeout
// redistest.ClusterNodeTimeout, 5s), under its load (with 4 signals queued
// on each busy thread, not 6, to keep the test under 45s): three runtimes,
// each on its own ClusterClient with go-redis's defaults and
// redisstreams.New, as users run them; 20 busy threads with runs of 1-3s
// and signals queued behind them, 80 threads of short signals sent
// continuously from every runtime. Mid-load it kills (SIGKILL) the master
// that holds signals.WorkTopic, whose slot every Send writes (the signal's
// notice), and waits until the Cluster promotes its replica. The claim
// under test (README, redisstreams/doc.go): a dead master's slots fail
// until the promotion, then a Backend's failing calls make the client
// reload its map of slots, and they work again within about half a second
// of it (TestClusterMasterFailoverResumes shows it without load). Redis
// replicates asynchronously: signals accepted before the kill may be lost,
// or run again unflagged; those are reported as figures. Asserted:
//
//  1. Sends work again: each runtime's first Send begun after the promotion
//     that returns nil returns within sendBackBound (2s) of it, every Send
//     begun later than that returns nil, and every signal accepted from a
//     Send begun after the promotion is given to an agent, more than once
//     only marked Redelivered;
//  2. no thread is stuck: every thread with an accepted signal waiting at
//     the promotion (one that ran at some point: a lost one is allowed)
//     starts a run within TTL + recovery + the longest run (3s) + 2s of
//     the promotion; once sends stop, every lease is free and every inbox
//     group and the work group drain;
//  3. no run starts twice (the same Run.ID and token);
//  4. Close of each runtime returns within TTL + 1s;
//  5. a Backend on a client of its own that made no call since before the
//     kill (the one that checks 2) works again: its GroupBacklog of the
//     work topic, retried every 20ms, succeeds within idleBackBound (10s)
//     once the senders stopped. Its first call fails only after go-redis's
//     dial retries to the dead address (3.3-3.4s), and must make the client
//     reload the map; GroupBacklog did not (every call failed, 16 in 10s,
//     until go-redis's own reload, 60s after the last).
//
// The killed node is restarted (it rejoins as a replica) after 5, while
// the queued signals drain: go-redis's pools redial a dead address every
// second from goroutines of their own, which goleak would find.
//
// 2026-11-28, on the shared 2-core machine under -race, 3 runs at these
// settings, all passed in 39.3-41.2s: the replica was promoted 7.3-8.4s
// after the kill (35 of the 100 threads had their lease and inbox on the
// killed master); each runtime's first Send ok 171-431ms after the
// promotion (6 earlier runs, with 4-6s of sends after the promotion:
// 64ms-1.2s; one runtime took 1.198s once, the others 0.2-0.4s); 0
// signals accepted before the promotion lost (1-5 were accepted between
// the kill and the promotion), 3-4 given twice, flagged; threads with work
// waiting at the promotion (17-21) first ran 541ms-1.43s after it at the
// latest (bound 8.5s); no overlap, no repeated token, no run started
// twice; the idle Backend's first GroupBacklog failed after 3.3-4.2s and
// the next worked; settled 3.4-5.2s after all were given; Close 1-34ms.
// Signals sent to busy threads after the promotion waited up to 18s to be
// given: a queue (one signal per run of 1-3s), not the failover.
func TestClusterFailoverUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("a 40s failover load test: skipped under -short")
	}
	cl := redistest.StartClusterReplicas(t, 3, 1)
	ctx := context.Background()
	const (
		ttl           = 3 * time.Second
		recovery      = 500 * time.Millisecond
		busy          = 20
		perBusy       = 4
		short         = 80
		senders       = 6
		sendCtx       = 2 * time.Second
		prefix        = "cfload"
		maxRun        = 3 * time.Second
		slack         = 2 * time.Second
		sendBackBound = 2 * time.Second
		afterPromote  = 3 * time.Second
		idleBackBound = 10 * time.Second
	)
	logs := newLogCount()
	lg := &bhLog{given: map[string][]loadGiven{}}
	runs := startLoadRuns(t, func() redis.UniversalClient { return cl.Client(t) }, redisstreams.Options{Prefix: prefix}, lg, logs, ttl, recovery)
	rts := runs.rts
	lookC := cl.Client(t)
	look, err := redisstreams.New(lookC, redisstreams.Options{Prefix: prefix, Logger: slog.New(logs)})
	if err != nil {
		t.Fatal(err)
	}
	defer look.Close()

	// The victim: the master of the work topic's slot.
	space, err := keys.NewSpace(prefix)
	if err != nil {
		t.Fatal(err)
	}
	masterOf := func(key string) string {
		m, err := lookC.MasterForKey(ctx, key)
		if err != nil {
			t.Fatalf("master of %s: %v", key, err)
		}
		return m.Options().Addr
	}
	addr := masterOf(space.Stream(signals.WorkTopic))
	allThreads := loadThreads(busy, short)
	var leasesOn, inboxesOn int
	for _, th := range allThreads {
		if masterOf(space.Lease(signals.LeaseKey(th))) == addr {
			leasesOn++
		}
		if masterOf(space.Stream(signals.InboxTopic(th))) == addr {
			inboxesOn++
		}
	}
	controlOn := masterOf(space.Stream(signals.ControlTopic)) == addr

	ls := newLoadSender(rts...)
	ls.warmUp(short, busy, perBusy)
	stopSends := ls.stream(senders, short, busy, sendCtx, func() int { return rand.IntN(len(rts)) })
	defer stopSends()
	time.Sleep(3 * time.Second)

	victim, newMaster, killed := cl.FailOver(t, addr)
	promoted := time.Now()
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			victim.Restart(t)
		}
	})
	time.Sleep(afterPromote)
	stopSends()
	sendsEnd := time.Now()

	// 1. Sends work again.
	fs := checkSendsBack(t, ls, rts, killed, promoted, sendBackBound)
	for _, rt := range rts {
		p := rt.ProcessID()
		if ok, found := fs.firstOK[p]; found && ok.Sub(promoted) > sendBackBound {
			t.Errorf("%s's first Send begun after the promotion that returned nil returned %v after it, bound %v", p, ok.Sub(promoted).Round(time.Millisecond), sendBackBound)
		}
	}

	// 5. The look Backend's client has made no call since before the
	// kill: its first call for the killed master's slots fails (after
	// go-redis's dial retries) and must make the client reload its map of
	// slots, as any idle client's would; checkSettled below needs it.
	lookBack, lookFailed, lookErr := redistest.RetryUntil(idleBackBound, func() error {
		_, err := look.GroupBacklog(ctx, signals.WorkTopic, signals.WorkGroup)
		return err
	})
	if lookErr != nil {
		t.Fatalf("an idle Backend's GroupBacklog of the work topic: %d calls in %v after the senders stopped all failed, the last with: %v", lookFailed, lookBack.Round(time.Millisecond), lookErr)
	}
	// The killed node back (it rejoins as a replica), so that go-redis's
	// redials of it end well before the test does.
	victim.Restart(t)
	restarted = true

	lg.waitGiven(t, fs.accepted, fs.proc, func(s loadSend) bool { return s.start.After(promoted) }, promoted, "the promotion", sendsEnd.Add(60*time.Second))
	lostDuring := fs.lostBetween(lg, killed, promoted)
	allGiven := time.Now()

	// 2b. Nothing stuck: no lease held, inboxes and the work group drained.
	checkSettled(t, look, allThreads, 30*time.Second)
	settled := time.Since(allGiven)

	// 4. Close.
	closeTimes := runs.closeAll(t, ttl)

	lg.mu.Lock()
	defer lg.mu.Unlock()
	// 1b (duplicates), 2a (every thread with work waiting at the promotion
	// runs within the bound), 3 (no run starts twice). Overlaps and tokens
	// out of order are allowed without LeaseSyncReplicas: reported.
	takeBound := ttl + recovery + maxRun + slack
	fr := checkFailoverRuns(t, lg, fs, allThreads, killed, promoted, ttl, takeBound)
	for _, s := range fr.anomalies[:min(len(fr.anomalies), 10)] {
		t.Logf("allowed without LeaseSyncReplicas: %s", s)
	}
	// How long signals accepted after the promotion waited to be given
	// (busy threads take one signal per run of 1-3s: a queue).
	var waits []time.Duration
	var maxWait time.Duration
	var slowWait string
	for id, x := range fs.accepted {
		if gs := lg.given[id]; x.start.After(promoted) && len(gs) > 0 {
			d := gs[0].at.Sub(x.end)
			if len(waits) == 0 || d > maxWait {
				maxWait, slowWait = d, fmt.Sprintf("%s to %s, sent %+.3fs from the promotion", id, x.thread, x.start.Sub(promoted).Seconds())
			}
			waits = append(waits, d)
		}
	}
	slices.Sort(waits)

	t.Logf("killed master %s (the work topic's; the control topic's too: %v; leases of %d and inboxes of %d of the %d threads); replica %s promoted %v after the kill",
		addr, controlOn, leasesOn, inboxesOn, len(allThreads), newMaster.Addr(), promoted.Sub(killed).Round(time.Millisecond))
	t.Logf("first Send ok after the promotion (any runtime): %v (bound %v); accepted between the kill and the promotion and never given: %d %v",
		fs.firstAny.Sub(promoted).Round(time.Millisecond), sendBackBound, len(lostDuring), lostDuring[:min(len(lostDuring), 10)])
	logFailoverFigures(t, fs, fr, rts, promoted, takeBound)
	if n := len(waits); n > 0 {
		t.Logf("signals accepted after the promotion: %d, from Send's return to given: median %v, p99 %v, max %v (%s)",
			n, waits[n/2].Round(time.Millisecond), waits[n*99/100].Round(time.Millisecond), waits[n-1].Round(time.Millisecond), slowWait)
	}
	t.Logf("an idle Backend's GroupBacklog ok after %d failed calls (%v, from %v after the promotion); all given %v after the senders stopped; settled %v after that; Close %v",
		lookFailed, lookBack.Round(time.Millisecond), sendsEnd.Sub(promoted).Round(time.Millisecond), allGiven.Sub(sendsEnd).Round(time.Millisecond), settled.Round(time.Millisecond), closeTimes)
	logTop(t, logs, 8)
}
