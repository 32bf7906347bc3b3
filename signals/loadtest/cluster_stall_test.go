package loadtest_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/keys"
	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

// TestClusterStalledMasterUnderLoad stops (SIGSTOP) one master of a Redis
// Cluster for 12s, past the cluster's node timeout (5s), under load, and
// in the middle of it closes one runtime and black-holes another. The
// Cluster has 3 masters, no replica (so the pause is a stall, not a
// failover) and cluster-require-full-coverage no (so the healthy masters
// keep serving their slots once the cluster deems the paused one failed,
// instead of answering CLUSTERDOWN: redistest.ClusterOptions.PartialCoverage).
// The paused master holds neither signals.WorkTopic's nor
// signals.ControlTopic's slot. Four runtimes A, B, C and D, each on its own
// ClusterClient with go-redis's defaults and redisstreams.New, as users run
// them (C's client dials each node through a redistest.Proxy, its only other
// setting); 30 busy threads (runs of 1-3s, 4 signals queued on each) and 200
// short ones (runs of 0-5ms); 6 senders stream Sends to the threads whose
// keys (lease and inbox, done record) are all on the healthy masters
// ("healthy" threads; one signal in 100 to a busy one) and 3 to the others
// ("sick" threads; one in 40), from a random live runtime each. Half a
// second into the pause D's Close begins (ctx 10s), while D holds threads,
// some on the paused master; a second later C's connections are black-holed
// (they stay open, nothing answers: a runtime whose host went away) while
// it owns threads, some busy with signals queued. At the resume C is
// restored too. Asserted (signals/doc.go and the README's promises):
//
//  1. during the pause, every Send to a healthy thread (by A or B, by C
//     before its black hole, by D before its Close) returns nil within
//     sendBound (1.5s; a call that waits for the paused master waits for
//     go-redis's ReadTimeout, 5s: doc.go "On a Redis Cluster, a master that
//     stops answering holds up the threads whose keys it holds [...]; the
//     other threads go on"), and its signal, to a short thread neither C
//     nor D held (see 3 and 7), is given to an agent within runBound (3s)
//     of the Send's start; at least 200 such Sends return in the pause;
//  2. during the pause, every Send to a sick thread returns by its ctx
//     deadline + 500ms ("Send returns when its ctx ends, also while Redis
//     does not answer");
//  3. every healthy thread C held at its black hole with work waiting runs
//     on another runtime within TTL + recovery + 2s of the black hole
//     (doc.go "Takeover", the bound of TestProcTakeoverUnderSendStream),
//     while the master is still paused: the notice handlers and the lapse
//     watch of the others meanwhile hold the sick threads' notices, whose
//     calls wait for the paused master; a signal sent in the pause to such
//     a short thread is given within runBound of the later of its Send and
//     that bound;
//  4. after the resume: every Send begun more than 2s after it returns
//     nil, and A, B and C each have one that does (checkSendsBack); every
//     accepted signal is given to an agent (those of the sick threads
//     too), more than once only marked Redelivered; every thread with work
//     waiting at the resume starts a run within TTL + recovery + the
//     longest run (3s) + 2s of it (checkFailoverRuns); once sends stop
//     every lease is free and every inbox group and the work group drain
//     (checkSettled);
//  5. no run starts twice (the same Run.ID), no two runs of a thread at
//     once, and fencing tokens rise with run starts (no write is lost: no
//     failover);
//  6. A's, B's and C's Close return nil within TTL + 1s (closeAll);
//  7. D's Close, begun in the pause, returns nil within its documented
//     bound: a TTL (+500ms) after the later of its start and D's last run's
//     return (and its ctx + 1s); D starts no run after it began; every
//     healthy thread D held as it began with work waiting runs on another
//     runtime within recovery + 2s of Close's return (doc.go: Close "hands
//     its signals to the live runtimes, which start them within a recovery
//     interval", TestProcCloseHandsOver), and a signal sent in the pause to
//     such a short thread within runBound of the later of its Send and
//     that bound.
//
// When a Send to a healthy thread in the pause has not returned after
// sendBound, or a healthy signal of (1) is not given after runBound, every
// goroutine's stack is written to a file in os.TempDir() (named in the
// log), once each.
func TestClusterStalledMasterUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("a 50s load test: skipped under -short")
	}
	cl := redistest.StartClusterWith(t, redistest.ClusterOptions{Masters: 3, PartialCoverage: true})
	ctx := context.Background()
	const (
		ttl          = 3 * time.Second
		recovery     = 500 * time.Millisecond
		busy         = 30
		perBusy      = 4
		short        = 200
		senders      = 6
		sickSenders  = 3
		sendCtx      = 2 * time.Second
		prefix       = "csload"
		maxRun       = 3 * time.Second
		slack        = 2 * time.Second
		pauseFor     = 12 * time.Second
		closeAfter   = 500 * time.Millisecond
		holeAfter    = 1500 * time.Millisecond
		dCloseCtx    = 10 * time.Second
		afterResume  = 4 * time.Second
		sendBound    = 1500 * time.Millisecond
		runBound     = 3 * time.Second
		minSends     = 200
		sendBack     = 2 * time.Second
		takeBound    = ttl + recovery + slack
		resumeBound  = ttl + recovery + maxRun + slack
		givenBound   = 45 * time.Second
		settledBound = 30 * time.Second
	)

	// C's connections go through a proxy per node, so that C alone can be
	// black-holed; its client is otherwise a default one.
	proxyOf := map[string]*redistest.Proxy{}
	for _, n := range cl.Nodes() {
		proxyOf[n.Addr()] = redistest.NewProxy(t, n.Addr())
	}
	made := 0
	newClient := func() redis.UniversalClient {
		made++
		if made < 3 {
			return cl.Client(t)
		}
		o := cl.ClientOptions()
		o.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
			if p, ok := proxyOf[addr]; ok {
				addr = p.Addr()
			}
			d := net.Dialer{Timeout: 5 * time.Second, KeepAlive: 5 * time.Minute}
			return d.DialContext(ctx, network, addr)
		}
		cc := redis.NewClusterClient(o)
		t.Cleanup(func() { _ = cc.Close() })
		return cc
	}
	logs := newLogCount()
	lg := &bhLog{given: map[string][]loadGiven{}}
	runs := startLoadRuns(t, newClient, redisstreams.Options{Prefix: prefix}, lg, logs, ttl, recovery)
	// D: a fourth runtime (default client), closed in the pause.
	dB, err := redisstreams.New(cl.Client(t), redisstreams.Options{Prefix: prefix, Logger: slog.New(logs)})
	if err != nil {
		t.Fatal(err)
	}
	// D's RunStarted events' Times (when D committed to each run) and its
	// Closing event's: no run of D starts after Close began.
	var dEvMu sync.Mutex
	dStarted := map[string]time.Time{}
	var dClosingAt []time.Time
	d, err := signals.New(dB, lg.agent("D"), signals.WithProcessID("D"), signals.WithLogger(slog.New(logs)),
		signals.WithLeaseTTL(ttl), signals.WithRecoveryInterval(recovery),
		signals.WithObserver(func(e signals.Event) {
			dEvMu.Lock()
			defer dEvMu.Unlock()
			switch e.Kind {
			case signals.RunStarted:
				dStarted[e.RunID] = e.Time
			case signals.Closing:
				dClosingAt = append(dClosingAt, e.Time)
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	dClosed := false
	t.Cleanup(func() {
		if !dClosed {
			cctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			_ = d.Close(cctx)
			cancel()
		}
		_ = dB.Close()
	})
	rts := append(slices.Clone(runs.rts), d)
	lookC := cl.Client(t)
	look, err := redisstreams.New(lookC, redisstreams.Options{Prefix: prefix, Logger: slog.New(logs)})
	if err != nil {
		t.Fatal(err)
	}
	defer look.Close()

	// The paused master: one without the work and the control topics.
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
	topicsOn := map[string]bool{masterOf(space.Stream(signals.WorkTopic)): true, masterOf(space.Stream(signals.ControlTopic)): true}
	var paused *redistest.Server
	for _, n := range cl.Nodes() {
		if !topicsOn[n.Addr()] {
			paused = n
			break
		}
	}
	if paused == nil {
		t.Fatal("no master without the work and control topics")
	}
	// A thread is sick when its lease and inbox ({signals.thread.<th>})
	// or its done record ({signals.done.<th>}) are on the paused master.
	allThreads := loadThreads(busy, short)
	healthy := map[string]bool{}
	var healthyShort, healthyBusy, sickShort, sickBusy []string
	for _, th := range allThreads {
		ok := masterOf(space.Lease(signals.LeaseKey(th))) != paused.Addr() && masterOf(space.Lease("signals.done."+th)) != paused.Addr()
		healthy[th] = ok
		switch isBusy := strings.HasPrefix(th, "busy-"); {
		case ok && isBusy:
			healthyBusy = append(healthyBusy, th)
		case ok:
			healthyShort = append(healthyShort, th)
		case isBusy:
			sickBusy = append(sickBusy, th)
		default:
			sickShort = append(sickShort, th)
		}
	}
	if len(healthyShort) == 0 || len(sickShort) == 0 {
		t.Fatalf("%d healthy and %d sick short threads: want some of each", len(healthyShort), len(sickShort))
	}

	// Phases, for the senders and the watchdogs: the pause, C's black hole.
	var pausedNs, resumedNs, holedNs, dCloseNs atomic.Int64
	at := func(a *atomic.Int64) time.Time {
		if n := a.Load(); n != 0 {
			return time.Unix(0, n)
		}
		return time.Time{}
	}
	inPause := func(tm time.Time) bool {
		p, r := at(&pausedNs), at(&resumedNs)
		return !p.IsZero() && !tm.Before(p) && (r.IsZero() || tm.Before(r))
	}
	// Goroutine dumps, once per reason, in files that outlive the test.
	var dumpMu sync.Mutex
	dumps := map[string]string{}
	dump := func(reason, what string) {
		dumpMu.Lock()
		defer dumpMu.Unlock()
		if _, ok := dumps[reason]; ok {
			return
		}
		buf := make([]byte, 16<<20)
		buf = buf[:runtime.Stack(buf, true)]
		f, err := os.CreateTemp("", "leasebus-clusterstall-"+reason+"-*.txt")
		if err != nil {
			dumps[reason] = fmt.Sprintf("%s (no file: %v)", what, err)
			return
		}
		fmt.Fprintf(f, "%s\n\n%s", what, buf)
		_ = f.Close()
		dumps[reason] = fmt.Sprintf("%s: %s", what, f.Name())
	}

	ls := newLoadSender(rts...)
	ls.slowAfter = sendBound
	ls.slow = func(proc, th, id string, began time.Time) {
		if healthy[th] && inPause(began) && (proc != "C" || at(&holedNs).IsZero()) && (proc != "D" || at(&dCloseNs).IsZero()) {
			dump("send", fmt.Sprintf("Send of %s to healthy %s by %s, begun %v into the pause, not returned after %v",
				id, th, proc, began.Sub(at(&pausedNs)).Round(time.Millisecond), sendBound))
		}
	}
	ls.warmUp(short, busy, perBusy)
	var cHoled, dClosing atomic.Bool
	pick := func() int {
		live := []int{0, 1} // A, B
		if !cHoled.Load() {
			live = append(live, 2)
		}
		if !dClosing.Load() {
			live = append(live, 3)
		}
		return live[rand.IntN(len(live))]
	}
	// Every busyEvery-th signal of a stream goes to a busy thread: one in
	// 100 of the healthy stream keeps its busy threads' queues short.
	pickOf := func(shorts, busies []string, busyEvery int64) func(int64) string {
		return func(k int64) string {
			if k%busyEvery == 0 && len(busies) > 0 {
				return busies[rand.IntN(len(busies))]
			}
			return shorts[rand.IntN(len(shorts))]
		}
	}
	stopHealthy := ls.streamTo(senders, "h", sendCtx, pickOf(healthyShort, healthyBusy, 100), pick)
	stopSick := ls.streamTo(sickSenders, "k", sendCtx, pickOf(sickShort, sickBusy, 40), pick)
	stopSends := func() { stopHealthy(); stopSick() }
	defer stopSends()
	// A fresh ClusterClient loads go-redis's command table (COMMAND) from
	// a random node at its first command, which waits for the client's
	// ReadTimeout (5s) when that node is the paused one: look makes its
	// first call now.
	if _, err := look.GetLeaseOwner(ctx, signals.LeaseKey(allThreads[0])); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)

	// cOwned, dOwned: the healthy threads C holds at its black hole (read
	// after it too, for acquires in flight then), and D as its Close
	// begins, with the owner.
	var cMu sync.Mutex
	cOwned, dOwned := map[string]string{}, map[string]string{}
	readOwned := func(proc string, owned map[string]string) {
		for _, th := range allThreads {
			if !healthy[th] {
				continue
			}
			// A healthy thread's lease is on a healthy master: its
			// owner is read at once.
			c0 := time.Now()
			lctx, cancel := context.WithTimeout(ctx, time.Second)
			o, err := look.GetLeaseOwner(lctx, signals.LeaseKey(th))
			cancel()
			if d := time.Since(c0); d > 500*time.Millisecond {
				t.Errorf("reading the lease owner of healthy %s (on %s) took %v (err %v)", th, masterOf(space.Lease(signals.LeaseKey(th))), d.Round(time.Millisecond), err)
			}
			if err != nil {
				t.Errorf("lease owner of %s: %v", th, err)
				continue
			}
			if strings.HasPrefix(o, proc+"/") {
				cMu.Lock()
				if _, ok := owned[th]; !ok {
					owned[th] = o
				}
				cMu.Unlock()
			}
		}
	}
	// promptChecked reports whether signal x is one that (1) requires to
	// be given within runBound of its Send.
	promptChecked := func(x loadSend, proc string) bool {
		if !healthy[x.thread] || strings.HasPrefix(x.thread, "busy-") || !inPause(x.start) {
			return false
		}
		if h := at(&holedNs); proc == "C" && !h.IsZero() && x.end.After(h) {
			return false
		}
		if c := at(&dCloseNs); proc == "D" && !c.IsZero() && x.end.After(c) {
			return false
		}
		cMu.Lock()
		_, c := cOwned[x.thread]
		_, dd := dOwned[x.thread]
		cMu.Unlock()
		return !c && !dd
	}
	// The watchdog of (1)'s runs: a dump when one is late.
	wdStop := make(chan struct{})
	var wdDone sync.WaitGroup
	wdDone.Go(func() {
		tk := time.NewTicker(200 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-wdStop:
				return
			case <-tk.C:
			}
			if at(&pausedNs).IsZero() {
				continue
			}
			now := time.Now()
			ls.mu.Lock()
			var late []loadSend
			for _, x := range ls.sends {
				if x.err == nil && now.Sub(x.start) > runBound && promptChecked(x, ls.proc[x.id]) {
					late = append(late, x)
				}
			}
			ls.mu.Unlock()
			lg.mu.Lock()
			for _, x := range late {
				if len(lg.given[x.id]) == 0 {
					lg.mu.Unlock()
					dump("run", fmt.Sprintf("signal %s to healthy %s, sent %v into the pause, not given after %v",
						x.id, x.thread, x.start.Sub(at(&pausedNs)).Round(time.Millisecond), runBound))
					lg.mu.Lock()
					break
				}
			}
			lg.mu.Unlock()
		}
	})
	stopWatchdog := sync.OnceFunc(func() { close(wdStop); wdDone.Wait() })
	defer stopWatchdog()

	paused.Pause(t)
	pausedAt := time.Now()
	pausedNs.Store(pausedAt.UnixNano())
	resumedOK := false
	t.Cleanup(func() {
		if !resumedOK {
			paused.Resume(t)
		}
	})
	// D's Close, in the pause: it lets its runs finish and hands its
	// notices over; its teardown waits for nothing on the paused master
	// longer than a TTL.
	time.Sleep(closeAfter)
	readOwned("D", dOwned)
	dCloseStart := time.Now()
	dCloseNs.Store(dCloseStart.UnixNano())
	dClosing.Store(true)
	var dCloseEnd time.Time
	var dCloseErr error
	var dCloseWG sync.WaitGroup
	dCloseWG.Go(func() {
		cctx, cancel := context.WithTimeout(ctx, dCloseCtx)
		dCloseErr = d.Close(cctx)
		cancel()
		dCloseEnd = time.Now()
	})
	time.Sleep(time.Until(pausedAt.Add(holeAfter)))
	readOwned("C", cOwned)
	for _, p := range proxyOf {
		p.BlackHole()
	}
	holed := time.Now()
	holedNs.Store(holed.UnixNano())
	cHoled.Store(true)
	restoredOK := false
	t.Cleanup(func() {
		if !restoredOK {
			for _, p := range proxyOf {
				p.Restore()
			}
		}
	})
	time.Sleep(300 * time.Millisecond)
	readOwned("C", cOwned)
	// What C was doing at the hole.
	lg.mu.Lock()
	var cBusyOwned, cMidRun int
	for th := range cOwned {
		if strings.HasPrefix(th, "busy-") {
			cBusyOwned++
		}
		for _, r := range lg.runs {
			if r.thread == th && r.proc == "C" && (r.end.IsZero() || r.end.After(holed)) && r.start.Before(holed) {
				cMidRun++
				break
			}
		}
	}
	lg.mu.Unlock()

	time.Sleep(time.Until(pausedAt.Add(pauseFor)))
	paused.Resume(t)
	resumedOK = true
	for _, p := range proxyOf {
		p.Restore()
	}
	restoredOK = true
	resumed := time.Now()
	resumedNs.Store(resumed.UnixNano())
	cHoled.Store(false)
	time.Sleep(afterResume)
	stopSends()
	sendsEnd := time.Now()
	dCloseWG.Wait()
	dClosed = true

	// 4a. Sends work again after the resume (and C's after its restore).
	fs := checkSendsBack(t, ls, runs.rts, pausedAt, resumed, sendBack)

	// 1a, 2. Sends in the pause.
	var hSends, hFailed, hSlow, kSends, kSlow, cHoleSends, dCloseSends int
	var hMax, kMax time.Duration
	var hMaxDesc, kMaxDesc string
	for _, x := range fs.all {
		if !inPause(x.start) {
			continue
		}
		proc := fs.proc[x.id]
		d := x.end.Sub(x.start)
		if proc == "C" && x.end.After(holed) {
			cHoleSends++
			continue
		}
		if proc == "D" && x.end.After(dCloseStart) {
			dCloseSends++
			continue
		}
		if healthy[x.thread] {
			hSends++
			if d > hMax {
				hMax, hMaxDesc = d, fmt.Sprintf("%s to %s by %s, %+.3fs from the pause", x.id, x.thread, proc, x.start.Sub(pausedAt).Seconds())
			}
			if x.err != nil {
				hFailed++
				if hFailed <= 10 {
					t.Errorf("Send of %s to healthy %s by %s, begun %v into the pause, failed after %v: %v", x.id, x.thread, proc, x.start.Sub(pausedAt).Round(time.Millisecond), d.Round(time.Millisecond), x.err)
				}
			}
			if d > sendBound {
				hSlow++
				if hSlow <= 10 {
					t.Errorf("Send of %s to healthy %s by %s, begun %v into the pause, took %v (bound %v; err %v)", x.id, x.thread, proc, x.start.Sub(pausedAt).Round(time.Millisecond), d.Round(time.Millisecond), sendBound, x.err)
				}
			}
			continue
		}
		if x.end.After(resumed) {
			continue // (2) is about Sends that ended in the pause
		}
		kSends++
		if d > kMax {
			kMax, kMaxDesc = d, fmt.Sprintf("%s to %s by %s, err %v", x.id, x.thread, proc, x.err)
		}
		if d > sendCtx+500*time.Millisecond {
			kSlow++
			if kSlow <= 10 {
				t.Errorf("Send of %s to sick %s by %s, begun %v into the pause, took %v (ctx %v): %v", x.id, x.thread, proc, x.start.Sub(pausedAt).Round(time.Millisecond), d.Round(time.Millisecond), sendCtx, x.err)
			}
		}
	}
	if hSends < minSends {
		t.Errorf("only %d Sends to healthy threads returned in the pause, want at least %d", hSends, minSends)
	}

	// 4b. Every accepted signal is given.
	lg.waitGiven(t, fs.accepted, fs.proc, func(loadSend) bool { return true }, resumed, "the resume", sendsEnd.Add(givenBound))
	allGiven := time.Now()
	// 4c. Nothing stuck.
	checkSettled(t, look, allThreads, settledBound)
	settled := time.Since(allGiven)
	// 6. Close.
	stopWatchdog()
	closeTimes := runs.closeAll(t, ttl)

	lg.mu.Lock()
	defer lg.mu.Unlock()
	// 3 (no run starts twice), 4b (given twice only flagged, after the
	// resume), 4b (threads with work waiting at the resume run within
	// resumeBound).
	fr := checkFailoverRuns(t, lg, fs, allThreads, pausedAt, resumed, ttl, resumeBound)
	// 5. No overlap, tokens rise (no write was lost), and no signal
	// accepted before the resume given twice unflagged.
	for _, s := range fr.anomalies[:min(len(fr.anomalies), 10)] {
		t.Errorf("one owner at a time: %s", s)
	}
	for _, s := range fr.unflaggedBefore[:min(len(fr.unflaggedBefore), 10)] {
		t.Errorf("accepted before the resume and given twice without Redelivered: %s", s)
	}

	// 1b. Healthy signals in the pause given promptly.
	var hRuns, hLate int
	var runMax time.Duration
	var runMaxDesc string
	var runDs []time.Duration
	for _, x := range fs.all {
		if x.err != nil || !promptChecked(x, fs.proc[x.id]) {
			continue
		}
		gs := lg.given[x.id]
		hRuns++
		if len(gs) == 0 {
			continue // waitGiven failed the test
		}
		d := gs[0].at.Sub(x.start)
		runDs = append(runDs, d)
		if d > runMax {
			runMax, runMaxDesc = d, fmt.Sprintf("%s to %s by %s, sent %+.3fs from the pause, on %s", x.id, x.thread, fs.proc[x.id], x.start.Sub(pausedAt).Seconds(), gs[0].proc)
		}
		if d > runBound {
			hLate++
			if hLate <= 10 {
				t.Errorf("signal %s to healthy %s (sent by %s %v into the pause) given %v after its Send began (on %s), bound %v",
					x.id, x.thread, fs.proc[x.id], x.start.Sub(pausedAt).Round(time.Millisecond), d.Round(time.Millisecond), gs[0].proc, runBound)
			}
		}
	}
	slices.Sort(runDs)

	// 3 (C), 7 (D). The threads a victim held move to the other
	// runtimes: each with work waiting from the victim's end (from, the
	// hole or Close's start) runs elsewhere by base (or pend + slack when
	// its work came later), before the resume when base is before it; a
	// signal to one of its short threads sent in the pause is given
	// within runBound of the later of its Send and base. A run of the
	// victim from until on (C: its restore; D: never) counts as elsewhere.
	byThread := fr.byThread
	type moved struct {
		times          []time.Duration // first run elsewhere, from from
		slow           time.Duration
		slowDesc       string
		cancelled, sig int // the victim's runs cancelled in the pause; late signals
	}
	checkMoved := func(proc string, owned map[string]string, from, base, until time.Time, what string) *moved {
		m := &moved{}
		for th, owner := range owned {
			// pend: when work first waited for th from from on (an
			// accepted signal not given before from, or given to a
			// cancelled run of the victim).
			var pend time.Time
			for id, s := range fs.accepted {
				if s.thread != th || !s.start.Before(resumed) {
					continue
				}
				gs := lg.given[id]
				waiting := len(gs) == 0 || !gs[0].at.Before(from)
				if !waiting {
					for _, r := range byThread[th] {
						if r.proc == proc && r.cancelled && slices.Contains(r.sigs, id) {
							waiting = true
						}
					}
				}
				if waiting {
					if p := later(s.start, from); pend.IsZero() || p.Before(pend) {
						pend = p
					}
				}
				// (A busy thread's signals queue behind its runs.)
				if strings.HasPrefix(th, "short-") && inPause(s.start) && (fs.proc[id] != proc || !s.end.After(from)) && len(gs) > 0 {
					if b := later(s.start, base).Add(runBound); gs[0].at.After(b) {
						m.sig++
						if m.sig <= 10 {
							t.Errorf("signal %s to %s (%s's at %s), sent %+.3fs from it, given %+.3fs from it (on %s), bound %+.3fs",
								id, th, proc, what, s.start.Sub(from).Seconds(), gs[0].at.Sub(from).Seconds(), gs[0].proc, b.Sub(from).Seconds())
						}
					}
				}
			}
			for _, r := range byThread[th] {
				if r.proc == proc && r.cancelled && r.end.After(from) && r.end.Before(resumed) {
					m.cancelled++
				}
			}
			if pend.IsZero() {
				continue
			}
			var first *bhRun
			for _, r := range byThread[th] {
				if !r.start.Before(from) && (r.proc != proc || !r.start.Before(until)) {
					first = r
					break
				}
			}
			bound := later(base, pend.Add(slack))
			if first == nil {
				t.Errorf("thread %s (%s's %s at %s, work waiting from %+.3fs) never ran again", th, proc, owner, what, pend.Sub(from).Seconds())
				continue
			}
			d := first.start.Sub(from)
			m.times = append(m.times, d)
			if d > m.slow {
				m.slow, m.slowDesc = d, fmt.Sprintf("%s by %s, work waiting from %+.3fs, %s's lease %s", th, first.proc, pend.Sub(from).Seconds(), proc, owner)
			}
			if first.start.After(bound) {
				t.Errorf("thread %s (%s's %s at %s, work waiting from %+.3fs): first run elsewhere %v after it (on %s), bound %v",
					th, proc, owner, what, pend.Sub(from).Seconds(), d.Round(time.Millisecond), first.proc, bound.Sub(from).Round(time.Millisecond))
			}
			if bound.Before(resumed) && first.start.After(resumed) {
				t.Errorf("thread %s (%s's at %s) ran elsewhere only after the resume (%v after %s)", th, proc, what, d.Round(time.Millisecond), what)
			}
		}
		slices.Sort(m.times)
		return m
	}
	cm := checkMoved("C", cOwned, holed, holed.Add(takeBound), resumed, "the hole")
	dm := checkMoved("D", dOwned, dCloseStart, dCloseEnd.Add(recovery+slack), sendsEnd.Add(time.Hour), "its Close")
	// 7. D's Close: nil, within its bound, and no run of D starts after it
	// began: D committed to each run (its RunStarted event's Time) before
	// its Closing event. The agent's own clock cannot tell: a run committed
	// to just before Close may reach the agent after Close was called (CI
	// saw one 2ms after).
	var dLastEnd time.Time
	dRunsAfter, dReachedAfter := 0, 0
	dEvMu.Lock()
	if len(dClosingAt) != 1 {
		t.Errorf("D emitted %d Closing events, want 1", len(dClosingAt))
	}
	for _, r := range lg.runs {
		if r.proc != "D" {
			continue
		}
		if r.end.After(dLastEnd) {
			dLastEnd = r.end
		}
		if r.start.After(dCloseStart) {
			dReachedAfter++
		}
		at, ok := dStarted[r.id]
		switch {
		case !ok:
			t.Errorf("run %s of %s on D: no RunStarted event", r.id, r.thread)
		case len(dClosingAt) > 0 && at.After(dClosingAt[0]):
			dRunsAfter++
			if dRunsAfter <= 5 {
				t.Errorf("run %s of %s on D started %v after D's Closing event (%v after Close was called)",
					r.id, r.thread, at.Sub(dClosingAt[0]), at.Sub(dCloseStart))
			}
		}
	}
	if len(dClosingAt) > 0 {
		t.Logf("D's Closing event %v after Close was called; D's runs reaching the agent after Close was called: %d",
			dClosingAt[0].Sub(dCloseStart), dReachedAfter)
	}
	dEvMu.Unlock()
	if dCloseErr != nil {
		t.Errorf("D's Close: %v", dCloseErr)
	}
	dCloseBound := dCloseStart.Add(dCloseCtx + 1500*time.Millisecond)
	if tb := later(dCloseStart, dLastEnd).Add(ttl + 500*time.Millisecond); tb.Before(dCloseBound) {
		dCloseBound = tb
	}
	if dCloseEnd.After(dCloseBound) {
		t.Errorf("D's Close took %v (D's last run returned %+.3fs from its start): bound %v",
			dCloseEnd.Sub(dCloseStart).Round(time.Millisecond), dLastEnd.Sub(dCloseStart).Seconds(), dCloseBound.Sub(dCloseStart).Round(time.Millisecond))
	}
	var dBusyOwned int
	for th := range dOwned {
		if strings.HasPrefix(th, "busy-") {
			dBusyOwned++
		}
	}
	pct := func(ds []time.Duration, p float64) time.Duration {
		if len(ds) == 0 {
			return 0
		}
		return ds[min(len(ds)-1, int(p*float64(len(ds))))].Round(time.Millisecond)
	}

	var sickLeases, sickInboxes int
	for _, th := range allThreads {
		if !healthy[th] {
			sickInboxes++
		}
		if masterOf(space.Lease(signals.LeaseKey(th))) == paused.Addr() {
			sickLeases++
		}
	}
	t.Logf("paused master %s for %v (threads: %d healthy, %d sick: %d with their lease and inbox on it); C black-holed %+.3fs from the pause",
		paused.Addr(), resumed.Sub(pausedAt).Round(time.Millisecond), len(allThreads)-sickInboxes, sickInboxes, sickLeases, holed.Sub(pausedAt).Seconds())
	t.Logf("in the pause: %d Sends to healthy threads (%d failed, %d over %v), the slowest %v (%s); %d to sick threads ended in it, the slowest %v (%s, ctx %v); C's Sends cut by its hole %d",
		hSends, hFailed, hSlow, sendBound, hMax.Round(time.Millisecond), hMaxDesc, kSends, kMax.Round(time.Millisecond), kMaxDesc, sendCtx, cHoleSends)
	t.Logf("healthy short signals sent in the pause: %d, given after their Send began: median %v, p99 %v, max %v (%s; bound %v)",
		hRuns, pct(runDs, 0.5), pct(runDs, 0.99), runMax.Round(time.Millisecond), runMaxDesc, runBound)
	t.Logf("C held %d healthy threads at the hole (%d busy, %d mid-run); C's runs cancelled in the pause: %d; first run elsewhere of those with work waiting: %d, after the hole: min %v, median %v, max %v (%s; bound %v)",
		len(cOwned), cBusyOwned, cMidRun, cm.cancelled, len(cm.times), pct(cm.times, 0), pct(cm.times, 0.5), cm.slow.Round(time.Millisecond), cm.slowDesc, takeBound)
	t.Logf("D's Close began %+.3fs from the pause, took %v (err %v; D's last run returned %+.3fs from its start); D held %d healthy threads (%d busy); first run elsewhere of those with work waiting: %d, after Close began: min %v, median %v, max %v (%s; bound Close's end + %v); D's Sends cut by its Close %d",
		dCloseStart.Sub(pausedAt).Seconds(), dCloseEnd.Sub(dCloseStart).Round(time.Millisecond), dCloseErr, dLastEnd.Sub(dCloseStart).Seconds(), len(dOwned), dBusyOwned,
		len(dm.times), pct(dm.times, 0), pct(dm.times, 0.5), dm.slow.Round(time.Millisecond), dm.slowDesc, recovery+slack, dCloseSends)
	var sendBackS []string
	for _, rt := range runs.rts {
		p := rt.ProcessID()
		sendBackS = append(sendBackS, fmt.Sprintf("%s %v", p, fs.firstOK[p].Sub(resumed).Round(time.Millisecond)))
	}
	t.Logf("sends %d, accepted %d, failed %d (last failing one begun %+.3fs from the resume); first Send ok after the resume: %s",
		len(fs.all), len(fs.accepted), fs.failed, fs.lastFailStart.Sub(resumed).Seconds(), strings.Join(sendBackS, ", "))
	t.Logf("threads with work waiting at the resume: %d, first run after it: median %v, p90 %v, max %v (%s; bound %v)",
		len(fr.firstRuns), fr.firstRunPct(0.5), fr.firstRunPct(0.9), fr.firstRunPct(1), fr.slowDesc, resumeBound)
	t.Logf("runs %d; overlaps %d; tokens repeated %d, backwards %d; a run started again %d; given twice flagged Redelivered %d (after the resume %d), unflagged %d; given Redelivered at least once %d",
		fr.runs, fr.overlaps, fr.tokenRepeat, fr.tokenBack, fr.sameRun, fr.dupBeforeFlagged+fr.dupFlagged, fr.dupFlagged, fr.dupBeforeUnflagged+fr.dupUnflagged, fr.redeliveredAny)
	var lastGiven time.Time
	var lastDesc string
	for id, x := range fs.accepted {
		if gs := lg.given[id]; len(gs) > 0 && gs[0].at.After(lastGiven) {
			lastGiven, lastDesc = gs[0].at, fmt.Sprintf("%s to %s, sent %+.3fs from the resume", id, x.thread, x.start.Sub(resumed).Seconds())
		}
	}
	t.Logf("the last signal given: %s, %+.3fs from the resume", lastDesc, lastGiven.Sub(resumed).Seconds())
	t.Logf("all given %v after the senders stopped; settled %v after that; Close %v", allGiven.Sub(sendsEnd).Round(time.Millisecond), settled.Round(time.Millisecond), closeTimes)
	dumpMu.Lock()
	for r, d := range dumps {
		t.Logf("goroutine dump (%s): %s", r, d)
	}
	dumpMu.Unlock()
	logTop(t, logs, 8)
}
