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

	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

// TestReviewH69MutedOwnerUnderLoad (review h69): the black hole runs one
// way only (lagProxy.Mute): runtime A's commands still reach Redis, which
// runs them, but no reply comes back, and no new connection of A gets
// through. That is "its Redis connection stops answering" as a dead
// return path makes it (asymmetric routing, a firewall or NAT dropping one
// direction). Load as in TestBlackHoleOneRuntimeUnderLoad (20 busy
// threads, runs of 1-3s with 6 signals queued each, 100 short threads fed
// by 6 senders from every runtime; TTL 3s, recovery 500ms; every runtime
// on NewURL with go-redis's defaults). Asserts, as that test does, that
// every thread A held at the hole with work waiting runs on B or C within
// TTL + recovery + 2s of the hole (doc.go "Takeover"), that A's run ctx
// ends before a peer's run of its thread starts, every accepted signal is
// given, twice only flagged Redelivered, and logs when A's leases lapsed on
// the server.
func TestReviewH69MutedOwnerUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("a load test: skipped under -short")
	}
	srv, _ := startRedis(t)
	proxy := newLagProxy(t, srv.Addr())
	ctx := context.Background()
	const (
		ttl      = 3 * time.Second
		recovery = 500 * time.Millisecond
		hole     = 4 * ttl
		busy     = 20
		perBusy  = 6
		short    = 100
		senders  = 6
		sendCtx  = time.Second
		prefix   = "h69mute"
		slack    = 2 * time.Second
	)
	lg := &bhLog{given: map[string][]loadGiven{}}
	var evMu sync.Mutex
	var aLost []time.Time
	observe := func(e signals.Event) {
		if e.Kind == signals.LeaseLost && strings.HasPrefix(e.Owner, "A/") {
			evMu.Lock()
			aLost = append(aLost, e.Time)
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
	a, ab := mk("A", "redis://"+proxy.Addr()+"/0")
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
	stopSends := ls.stream(senders, short, busy, sendCtx, func() int { return rand.IntN(len(rts)) })
	defer stopSends()
	time.Sleep(3 * time.Second)

	allThreads := loadThreads(busy, short)
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
	proxy.Mute()
	holed := time.Now()
	unmuted := false
	t.Cleanup(func() {
		if !unmuted {
			proxy.Unmute()
		}
	})
	// When each lease of A on the server lapsed (polled).
	lapsed := map[string]time.Time{}
	for time.Since(holed) < hole {
		for th := range aOwned {
			if _, ok := lapsed[th]; ok {
				continue
			}
			o, err := look.GetLeaseOwner(ctx, signals.LeaseKey(th))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(o, "A/") {
				lapsed[th] = time.Now()
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	proxy.Unmute()
	unmuted = true
	restored := time.Now()
	time.Sleep(4 * time.Second)
	stopSends()
	sendsEnd := time.Now()

	all := ls.all()
	accepted := map[string]loadSend{}
	for _, s := range all {
		if s.err == nil {
			accepted[s.id] = s
		}
	}
	lg.waitGiven(t, accepted, ls.proc, func(loadSend) bool { return true }, holed, "the hole", sendsEnd.Add(60*time.Second))
	checkSettled(t, look, allThreads, 30*time.Second)

	lg.mu.Lock()
	defer lg.mu.Unlock()
	byThread := lg.byThread()
	overlaps := 0
	for th, rs := range byThread {
		for _, o := range runOverlaps(th, rs, holed, "the hole") {
			overlaps++
			if overlaps <= 10 {
				t.Error(o)
			}
		}
	}
	dupFlagged, dupUnflagged := checkGivenOnce(t, lg.given)

	takeBound := ttl + recovery + slack
	type tk struct {
		th          string
		took, lapse time.Duration
		by          string
	}
	var tks []tk
	for th := range aOwned {
		var pend time.Time
		for id, s := range accepted {
			if s.thread != th || !s.start.Before(restored) {
				continue
			}
			gs := lg.given[id]
			waiting := len(gs) == 0 || !gs[0].at.Before(holed)
			if !waiting {
				for _, r := range byThread[th] {
					if r.proc == "A" && r.cancelled {
						for _, x := range r.sigs {
							if x == id {
								waiting = true
							}
						}
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
		lp := time.Duration(-1)
		if l, ok := lapsed[th]; ok {
			lp = l.Sub(holed)
		}
		if first == nil {
			t.Errorf("thread %s (A's %s at the hole, work waiting from %+.3fs) never ran again", th, aOwned[th], pend.Sub(holed).Seconds())
			continue
		}
		d := first.start.Sub(holed)
		tks = append(tks, tk{th, d, lp, first.proc})
		if first.start.After(bound) {
			t.Errorf("thread %s (A's %s at the hole, work waiting from %+.3fs): first run after it %v after the hole (on %s), bound %v; A's lease gone from the server %v after the hole",
				th, aOwned[th], pend.Sub(holed).Seconds(), d.Round(time.Millisecond), first.proc, bound.Sub(holed).Round(time.Millisecond), lp.Round(time.Millisecond))
		}
	}
	sort.Slice(tks, func(i, j int) bool { return tks[i].took < tks[j].took })
	var desc []string
	for _, x := range tks {
		desc = append(desc, fmt.Sprintf("%s %v (lease gone %v)", x.th, x.took.Round(time.Millisecond), x.lapse.Round(time.Millisecond)))
	}
	evMu.Lock()
	var lostAt []string
	sort.Slice(aLost, func(i, j int) bool { return aLost[i].Before(aLost[j]) })
	for _, l := range aLost {
		if l.After(holed) && l.Before(restored) {
			lostAt = append(lostAt, fmt.Sprintf("%+.2fs", l.Sub(holed).Seconds()))
		}
	}
	evMu.Unlock()
	t.Logf("A held %d threads at the hole; takeovers of those with work waiting, after the hole: %s", len(aOwned), strings.Join(desc, ", "))
	t.Logf("A's LeaseLost events in the hole at: %v", lostAt)
	t.Logf("duplicates: %d flagged, %d unflagged; overlaps %d", dupFlagged, dupUnflagged, overlaps)
}
