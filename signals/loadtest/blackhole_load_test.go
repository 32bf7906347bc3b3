package loadtest_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

// TestBlackHoleOneRuntimeUnderLoad black-holes the network path of one of
// three runtimes (A; its connections stay open, nothing answers) for two
// TTLs while it owns many threads under load (20 busy threads with runs of
// 1-3s and signals queued behind them, 100 threads of short signals sent
// continuously from every runtime), then restores it, keeps the load a bit
// and stops. Each runtime is on its own redisstreams.NewURL client with
// go-redis defaults; A's goes through a redistest.Proxy. It asserts:
//
//  1. no two agents of a thread at once (a run's interval is from its start
//     to when its agent saw its ctx end or returned), and fencing tokens
//     rise with run starts;
//  2. every signal whose Send returned nil is given to an agent, more than
//     once only marked Redelivered;
//  3. every thread A held at the hole with work waiting runs on B or C
//     within TTL + recovery + 2s of the hole (doc.go "Takeover", the bound
//     of TestProcTakeoverUnderSendStream), while A is still black-holed;
//  4. after the restore A's Sends succeed and it runs agents again, and
//     once sends stop nothing stays stuck: no lease held, every inbox and
//     the work topic drained;
//  5. A's Sends during the hole return by their ctx deadline (+500ms) with
//     an error;
//  6. A's Close returns within its documented bound: a TTL after the later
//     of Close's start and A's last run's return (and its ctx + 1s).
//
// Variant CloseInHole closes A while it is still black-holed (2s after the
// hole began) and restores only after Close returned; A then sends no more.
func TestBlackHoleOneRuntimeUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("a 40s load test: skipped under -short")
	}
	t.Run("RestoreThenClose", func(t *testing.T) { blackHoleUnderLoad(t, false, 0) })
	t.Run("CloseInHole", func(t *testing.T) { blackHoleUnderLoad(t, true, 0) })
}

// blackHoleUnderLoad is TestBlackHoleOneRuntimeUnderLoad; with oneWay > 0
// every runtime reaches Redis through a redistest.SlowLink of that one-way
// delay (A's proxy in front of it), and it also asserts that B and C lose
// no lease (no run of theirs sees its ctx end) and that their clients
// (go-redis's default pool) have no pool timeout, and logs how long their
// accepted Sends took (TestReviewH78SlowLinkBlackHoleUnderLoad).
func blackHoleUnderLoad(t *testing.T, closeInHole bool, oneWay time.Duration) {
	srv, _ := startRedis(t)
	target, bcURL := srv.Addr(), srv.URL()
	if oneWay > 0 {
		link := redistest.NewSlowLink(t, srv.Addr(), oneWay)
		target, bcURL = link.Addr(), link.URL()
	}
	proxy := redistest.NewProxy(t, target)
	ctx := context.Background()
	const (
		ttl      = 3 * time.Second
		recovery = 500 * time.Millisecond
		hole     = 2 * ttl
		busy     = 20
		perBusy  = 6
		short    = 100
		senders  = 6
		sendCtx  = time.Second
		prefix   = "bhload"
		slack    = 2 * time.Second
	)
	lg := &bhLog{given: map[string][]loadGiven{}}
	mk := func(id, url string) (*signals.Runtime, *redisstreams.Backend) {
		b, err := redisstreams.NewURL(ctx, url, redisstreams.Options{Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		rt, err := signals.New(b, lg.agent(id), signals.WithProcessID(id),
			signals.WithLeaseTTL(ttl), signals.WithRecoveryInterval(recovery))
		if err != nil {
			t.Fatal(err)
		}
		return rt, b
	}
	a, ab := mk("A", "redis://"+proxy.Addr()+"/0")
	b, bb := mk("B", bcURL)
	c, cb := mk("C", bcURL)
	rts := []*signals.Runtime{a, b, c}
	var aClosed atomic.Bool
	t.Cleanup(func() {
		for _, x := range []struct {
			rt *signals.Runtime
			b  *redisstreams.Backend
		}{{c, cb}, {b, bb}, {a, ab}} {
			cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			_ = x.rt.Close(cctx)
			cancel()
			_ = x.b.Close()
		}
	})
	look, err := redisstreams.NewURL(ctx, srv.URL(), redisstreams.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer look.Close()

	ls := newLoadSender(rts...)
	ls.warmUp(short, busy, perBusy)
	stopSends := ls.stream(senders, short, busy, sendCtx, func() int {
		if aClosed.Load() {
			return 1 + rand.IntN(2) // B or C
		}
		return rand.IntN(len(rts))
	})
	defer stopSends()
	time.Sleep(3 * time.Second)

	allThreads := loadThreads(busy, short)
	// Threads A holds just before the hole.
	aOwned := map[string]string{}
	for _, th := range allThreads {
		o, err := look.GetLeaseOwner(ctx, signals.LeaseKey(th))
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(o, "A/") {
			aOwned[th] = o
		}
	}
	proxy.BlackHole()
	holed := time.Now()
	restoredOK := false
	t.Cleanup(func() {
		if !restoredOK {
			proxy.Restore()
		}
	})
	// What A was doing at the hole.
	lg.mu.Lock()
	var aMidRun, aBusyOwned int
	for th := range aOwned {
		if strings.HasPrefix(th, "busy-") {
			aBusyOwned++
		}
		for _, r := range lg.runs {
			if r.thread == th && r.proc == "A" && r.end.IsZero() {
				aMidRun++
				break
			}
		}
	}
	lg.mu.Unlock()

	var closeStart, closeEnd time.Time
	var closeErr error
	if closeInHole {
		time.Sleep(2 * time.Second)
		aClosed.Store(true)
		closeStart = time.Now()
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		closeErr = a.Close(cctx)
		cancel()
		closeEnd = time.Now()
		if d := time.Until(holed.Add(hole)); d > 0 {
			time.Sleep(d)
		}
	} else {
		time.Sleep(hole)
	}
	proxy.Restore()
	restoredOK = true
	restored := time.Now()
	time.Sleep(4 * time.Second)
	stopSends()
	sendsEnd := time.Now()

	all := ls.all()
	sendProc := ls.proc // (the senders have stopped)
	accepted := map[string]loadSend{}
	var failed, aHoleSends, aHoleFailed, aAfter, aAfterFailed, aInFlight int
	var aHoleMax time.Duration
	for _, s := range all {
		if s.err == nil {
			accepted[s.id] = s
		} else {
			failed++
		}
		if sendProc[s.id] != "A" {
			continue
		}
		if s.start.Before(holed) && s.end.After(holed) {
			aInFlight++
		}
		// 5. A's Sends that began in the hole and ended before the restore.
		if s.start.After(holed) && s.end.Before(restored) {
			aHoleSends++
			d := s.end.Sub(s.start)
			aHoleMax = max(aHoleMax, d)
			if s.err == nil {
				t.Errorf("A's Send of %s to %s during the black hole returned nil", s.id, s.thread)
			} else {
				aHoleFailed++
			}
			if d > sendCtx+500*time.Millisecond {
				t.Errorf("A's Send of %s during the black hole took %v (ctx %v)", s.id, d.Round(time.Millisecond), sendCtx)
			}
		}
		// 4. A's Sends begun 1s after the restore succeed.
		if !closeInHole && s.start.After(restored.Add(time.Second)) {
			aAfter++
			if s.err != nil {
				aAfterFailed++
				if aAfterFailed <= 10 {
					t.Errorf("A's Send of %s to %s %v after the restore failed: %v", s.id, s.thread, s.start.Sub(restored).Round(time.Millisecond), s.err)
				}
			}
		}
	}
	// 2. Every accepted signal is given.
	lg.waitGiven(t, accepted, sendProc, func(loadSend) bool { return true }, holed, "the hole", sendsEnd.Add(60*time.Second))
	allGiven := time.Now()

	// 4. Nothing stuck: no lease held, inboxes and the work topic drained.
	checkSettled(t, look, allThreads, 30*time.Second)
	settled := time.Since(allGiven)

	// 6. A's Close after all this.
	lg.mu.Lock()
	var aLastEnd time.Time
	for _, r := range lg.runs {
		if r.proc == "A" && r.end.After(aLastEnd) {
			aLastEnd = r.end
		}
	}
	lg.mu.Unlock()
	if !closeInHole {
		aClosed.Store(true)
		closeStart = time.Now()
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		closeErr = a.Close(cctx)
		cancel()
		closeEnd = time.Now()
	}
	closeTook := closeEnd.Sub(closeStart)
	if closeErr != nil {
		t.Logf("A's Close returned %v", closeErr)
	}
	closeBound := closeStart.Add(10*time.Second + time.Second + 500*time.Millisecond)
	if tb := later(closeStart, aLastEnd).Add(ttl + 500*time.Millisecond); tb.Before(closeBound) {
		closeBound = tb
	}
	if closeEnd.After(closeBound) {
		t.Errorf("A's Close took %v (started %+.3fs from the hole, A's last run returned %+.3fs from it): bound %v after Close's start",
			closeTook.Round(time.Millisecond), closeStart.Sub(holed).Seconds(), aLastEnd.Sub(holed).Seconds(), closeBound.Sub(closeStart).Round(time.Millisecond))
	}

	if oneWay > 0 {
		checkSlowLink(t, lg, all, sendProc, holed, map[string]*redisstreams.Backend{"B": bb, "C": cb})
	}

	lg.mu.Lock()
	defer lg.mu.Unlock()
	// 1. No two agents of a thread at once; tokens rise with run starts.
	byThread := lg.byThread()
	overlaps := 0
	for th, rs := range byThread {
		for _, o := range runOverlaps(th, rs, holed, "the hole") {
			overlaps++
			if overlaps <= 10 {
				t.Error(o)
			}
		}
		for i, r := range rs {
			for _, q := range rs[i+1:] {
				if q.token <= r.token {
					t.Errorf("%s: run %s on %s (token %d) started after run %s on %s (token %d)", th, q.id, q.proc, q.token, r.id, r.proc, r.token)
				}
			}
		}
	}
	// 2. Duplicates only flagged.
	dupFlagged, dupUnflagged := checkGivenOnce(t, lg.given)
	// 3. Takeover of A's threads with work waiting, by B or C, while the
	// hole lasts.
	takeBound := ttl + recovery + slack
	var takeovers []time.Duration
	var aCancelled int
	var slowTake time.Duration
	var slowDesc string
	for th := range aOwned {
		// pending: an accepted signal not given before the hole, or given
		// to an A run that was cancelled; from when it was pending.
		var pend time.Time
		for id, s := range accepted {
			if s.thread != th || !s.start.Before(restored) {
				continue
			}
			gs := lg.given[id]
			waiting := len(gs) == 0 || !gs[0].at.Before(holed)
			if !waiting {
				for _, r := range byThread[th] {
					if r.proc == "A" && r.cancelled && slices.Contains(r.sigs, id) {
						waiting = true
					}
				}
			}
			if waiting {
				p := later(s.start, holed)
				if pend.IsZero() || p.Before(pend) {
					pend = p
				}
			}
		}
		for _, r := range byThread[th] {
			if r.proc == "A" && r.cancelled && r.end.After(holed) && r.end.Before(restored) {
				aCancelled++
			}
		}
		if pend.IsZero() {
			continue
		}
		var first *bhRun
		for _, r := range byThread[th] {
			if !r.start.Before(holed) && (r.proc != "A" || !r.start.Before(restored)) {
				first = r
				break
			}
		}
		bound := later(holed.Add(takeBound), pend.Add(slack))
		if first == nil {
			t.Errorf("thread %s (A's %s at the hole, work waiting from %+.3fs) never ran again", th, aOwned[th], pend.Sub(holed).Seconds())
			continue
		}
		d := first.start.Sub(holed)
		takeovers = append(takeovers, d)
		if d > slowTake {
			slowTake = d
			slowDesc = fmt.Sprintf("%s by %s, work waiting from %+.3fs, A's lease %s", th, first.proc, pend.Sub(holed).Seconds(), aOwned[th])
		}
		if first.start.After(bound) {
			t.Errorf("thread %s (A's %s at the hole, work waiting from %+.3fs): first run after it %v after the hole (on %s), bound %v",
				th, aOwned[th], pend.Sub(holed).Seconds(), d.Round(time.Millisecond), first.proc, bound.Sub(holed).Round(time.Millisecond))
		}
		if bound.Before(restored) && first.start.After(restored) {
			t.Errorf("thread %s taken over only after the restore (%v after the hole)", th, d.Round(time.Millisecond))
		}
	}
	sort.Slice(takeovers, func(i, j int) bool { return takeovers[i] < takeovers[j] })
	// 4. A runs agents after the restore.
	aRunsAfter := 0
	for _, r := range lg.runs {
		if r.proc == "A" && r.start.After(restored) {
			aRunsAfter++
		}
	}
	if !closeInHole && aRunsAfter == 0 {
		t.Errorf("A started no run after the restore")
	}
	pct := func(p float64) time.Duration {
		if len(takeovers) == 0 {
			return 0
		}
		return takeovers[min(len(takeovers)-1, int(p*float64(len(takeovers))))].Round(time.Millisecond)
	}
	t.Logf("sends %d, accepted %d, failed %d; A's sends in the hole %d (failed %d, slowest %v); A's sends from restore+1s %d (failed %d)",
		len(all), len(accepted), failed, aHoleSends, aHoleFailed, aHoleMax.Round(time.Millisecond), aAfter, aAfterFailed)
	t.Logf("A's Sends in flight at the hole: %d", aInFlight)
	t.Logf("A held %d threads at the hole (%d busy, %d mid-run); A's runs cancelled in the hole: %d; A's runs after the restore: %d",
		len(aOwned), aBusyOwned, aMidRun, aCancelled, aRunsAfter)
	t.Logf("takeovers of A's threads with work waiting: %d, after the hole: min %v, median %v, p90 %v, max %v (bound %v)",
		len(takeovers), pct(0), pct(0.5), pct(0.9), pct(1), takeBound)
	t.Logf("slowest takeover: %v, %s", slowTake.Round(time.Millisecond), slowDesc)
	t.Logf("duplicates: %d flagged Redelivered, %d unflagged; overlaps %d; settled %v after all given; A's Close %v (err %v, started %+.3fs from the hole, A's last run returned %+.3fs)",
		dupFlagged, dupUnflagged, overlaps, settled.Round(time.Millisecond), closeTook.Round(time.Millisecond), closeErr, closeStart.Sub(holed).Seconds(), aLastEnd.Sub(holed).Seconds())
}
