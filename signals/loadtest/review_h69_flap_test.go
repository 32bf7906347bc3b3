package loadtest_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

// TestReviewH69FlappingHoleUnderLoad (review h69): runtime A's path to
// Redis goes dead and comes back again and again under load (holes of
// 0.5-2.5s, 0.3-2s apart, for 25s; TTL 3s): some holes pass within a
// TTL, so A keeps some leases through them with renewals retried,
// hand-offs, releases and acquires of unknown outcome pile up, and (Lag)
// each heal lets Redis run A's commands written into the hole up to 1.5s
// later, into the next hole sometimes. Drop is the same with
// redistest.Proxy (the bytes dropped, every connection cut at the
// restore). Every runtime is on NewURL with go-redis's defaults. It
// asserts what the single-hole tests do, for every run of the test: no two
// runs of a thread at once (by the ctx-cancel moment), fencing tokens
// rising with run starts, no run started twice (givenup.go), every
// accepted signal given, given again only marked Redelivered and only
// after a run of it reported LeaseLost, the busy threads' queued signals
// in order unless marked Redelivered, A's Sends within their ctx + 500ms,
// and nothing stuck once the load stops. In 9 runs of 2026-11-29 under
// -race (4 Lag, 5 Drop, beside other test binaries) one Drop run
// failed: a run of A started twice under one Run.ID (with a higher token
// the second time), a late acquire taken over again for a run that had
// run already (TestReviewH69LateStragglerStartsRunTwice is the
// deterministic form); the other checks held in all 9.
func TestReviewH69FlappingHoleUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("a load test: skipped under -short")
	}
	// (flapUnderLoad(t, true) flaps a lagProxy instead: 4 of 4 passed.)
	flapUnderLoad(t, false)
}

func flapUnderLoad(t *testing.T, lag bool) {
	srv, _ := startRedis(t)
	var hole, heal func()
	var addr string
	if lag {
		p := newLagProxy(t, srv.Addr())
		hole, heal, addr = p.Hole, func() { p.Heal(1500 * time.Millisecond) }, p.Addr()
	} else {
		p := redistest.NewProxy(t, srv.Addr())
		hole, heal, addr = p.BlackHole, p.Restore, p.Addr()
	}
	ctx := context.Background()
	const (
		ttl      = 3 * time.Second
		recovery = 500 * time.Millisecond
		busy     = 20
		perBusy  = 6
		short    = 100
		senders  = 6
		sendCtx  = time.Second
		prefix   = "h69flap"
		flapFor  = 25 * time.Second
	)
	lg := &bhLog{given: map[string][]loadGiven{}}
	var evMu sync.Mutex
	lostRuns := map[string]bool{}
	observe := func(e signals.Event) {
		if e.Kind == signals.LeaseLost {
			evMu.Lock()
			lostRuns[e.RunID] = true
			evMu.Unlock()
		}
	}
	mk := func(id, url string) (*signals.Runtime, *redisstreams.Backend) {
		b, err := redisstreams.NewURL(ctx, url, redisstreams.Options{Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		rt, err := signals.New(b, h69Agent(lg, id), signals.WithProcessID(id), signals.WithObserver(observe),
			signals.WithLeaseTTL(ttl), signals.WithRecoveryInterval(recovery))
		if err != nil {
			t.Fatal(err)
		}
		return rt, b
	}
	a, ab := mk("A", "redis://"+addr+"/0")
	b, bb := mk("B", srv.URL())
	c, cb := mk("C", srv.URL())
	rts := []*signals.Runtime{a, b, c}
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
	// The busy threads get a second ordered queue during the flapping.
	var orderWG sync.WaitGroup
	for i := range busy {
		orderWG.Go(func() {
			time.Sleep(time.Duration(rand.IntN(10000)) * time.Millisecond)
			for k := range perBusy {
				ls.send(rand.IntN(len(rts)), fmt.Sprint("busy-", i), fmt.Sprintf("q%d-%d", i, k), 10*time.Second)
			}
		})
	}
	stopSends := ls.stream(senders, short, busy, sendCtx, func() int { return rand.IntN(len(rts)) })
	defer stopSends()
	time.Sleep(2 * time.Second)

	type span struct{ from, to time.Time }
	var holes []span
	start := time.Now()
	healed := true
	t.Cleanup(func() {
		if !healed {
			heal()
		}
	})
	for time.Since(start) < flapFor {
		hole()
		healed = false
		h := span{from: time.Now()}
		time.Sleep(500*time.Millisecond + time.Duration(rand.IntN(2000))*time.Millisecond)
		heal()
		healed = true
		h.to = time.Now()
		holes = append(holes, h)
		time.Sleep(300*time.Millisecond + time.Duration(rand.IntN(1700))*time.Millisecond)
	}
	flapEnd := time.Now()
	time.Sleep(4 * time.Second)
	stopSends()
	orderWG.Wait()
	sendsEnd := time.Now()

	inHole := func(x time.Time) bool {
		for _, h := range holes {
			if !x.Before(h.from) && x.Before(h.to) {
				return true
			}
		}
		return false
	}
	all := ls.all()
	accepted := map[string]loadSend{}
	var failed, aSlow int
	for _, s := range all {
		if s.err == nil {
			accepted[s.id] = s
		} else {
			failed++
		}
		lim := sendCtx
		if !strings.HasPrefix(s.id, "s") {
			lim = 10 * time.Second
		}
		if d := s.end.Sub(s.start); d > lim+500*time.Millisecond {
			aSlow++
			if aSlow <= 5 {
				t.Errorf("Send of %s to %s by %s took %v (ctx %v), begun in a hole %v", s.id, s.thread, ls.proc[s.id], d.Round(time.Millisecond), lim, inHole(s.start))
			}
		}
	}
	lg.waitGiven(t, accepted, ls.proc, func(loadSend) bool { return true }, start, "the flapping's start", sendsEnd.Add(60*time.Second))
	checkSettled(t, look, loadThreads(busy, short), 30*time.Second)

	lg.mu.Lock()
	defer lg.mu.Unlock()
	byThread := lg.byThread()
	var overlaps, tokenBack, sameRun int
	for th, rs := range byThread {
		for _, o := range runOverlaps(th, rs, start, "the flapping's start") {
			overlaps++
			if overlaps <= 10 {
				t.Error(o)
			}
		}
		for i, r := range rs {
			for _, q := range rs[i+1:] {
				if q.id == r.id && q.proc == r.proc {
					sameRun++
					if sameRun <= 5 {
						t.Errorf("%s: run %s on %s started twice: token %d at %+.3fs (signals %v), token %d at %+.3fs (signals %v) from the start",
							th, r.id, r.proc, r.token, r.start.Sub(start).Seconds(), r.sigs, q.token, q.start.Sub(start).Seconds(), q.sigs)
					}
				} else if q.token <= r.token {
					tokenBack++
					if tokenBack <= 5 {
						t.Errorf("%s: run %s on %s (token %d) started after run %s on %s (token %d)", th, q.id, q.proc, q.token, r.id, r.proc, r.token)
					}
				}
			}
		}
	}
	dupFlagged, dupUnflagged := checkGivenOnce(t, lg.given)
	runsOf := map[string][]*bhRun{}
	for _, r := range lg.runs {
		for _, id := range r.sigs {
			runsOf[id] = append(runsOf[id], r)
		}
	}
	unjustified := 0
	evMu.Lock()
	for id, rs := range runsOf {
		sort.Slice(rs, func(i, j int) bool { return rs[i].start.Before(rs[j].start) })
		for _, r := range rs[:len(rs)-1] {
			if !lostRuns[r.id] {
				unjustified++
				if unjustified <= 10 {
					t.Errorf("signal %s ran again after run %s on %s (token %d, %+.3fs..%+.3fs from the start, cancelled %v), which reported no LeaseLost",
						id, r.id, r.proc, r.token, r.start.Sub(start).Seconds(), r.end.Sub(start).Seconds(), r.cancelled)
				}
			}
		}
	}
	evMu.Unlock()
	reorders := 0
	for i := range busy {
		for _, pfx := range []string{"b", "q"} {
			for k := 0; k+1 < perBusy; k++ {
				x, y := lg.given[fmt.Sprintf("%s%d-%d", pfx, i, k)], lg.given[fmt.Sprintf("%s%d-%d", pfx, i, k+1)]
				if len(x) == 0 || len(y) == 0 {
					continue
				}
				if y[0].at.Before(x[0].at) && !x[0].redelivered {
					reorders++
					if reorders <= 10 {
						t.Errorf("busy-%d: %s%d-%d first given %+.3fs from the start, after %s%d-%d (%+.3fs), not marked Redelivered",
							i, pfx, i, k, x[0].at.Sub(start).Seconds(), pfx, i, k+1, y[0].at.Sub(start).Seconds())
					}
				}
			}
		}
	}
	var aRuns, aCancelled int
	for _, r := range lg.runs {
		if r.proc == "A" && r.start.After(start) && r.start.Before(flapEnd) {
			aRuns++
			if r.cancelled {
				aCancelled++
			}
		}
	}
	var holeTotal time.Duration
	for _, h := range holes {
		holeTotal += h.to.Sub(h.from)
	}
	t.Logf("%d holes (%v in all over %v); sends %d, accepted %d, failed %d; A's runs in the flapping %d (cancelled %d); LeaseLost %d",
		len(holes), holeTotal.Round(time.Millisecond), flapEnd.Sub(start).Round(time.Millisecond), len(all), len(accepted), failed, aRuns, aCancelled, len(lostRuns))
	t.Logf("overlaps %d, tokens back %d, runs started twice %d; given twice %d flagged, %d unflagged; again without a LeaseLost %d; reorders unflagged %d",
		overlaps, tokenBack, sameRun, dupFlagged, dupUnflagged, unjustified, reorders)
}
