package loadtest_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

// loadLog records, for all runtimes of one test, what the agents and the
// observers saw.
type loadLog struct {
	mu sync.Mutex
	// per signal ID: one entry per time an agent was given it
	given map[string][]loadGiven
	// per thread: agents running now (all runtimes), and run start times
	active   map[string]int
	starts   map[string][]time.Time
	overlaps []string
	owners   map[string]bool // owners seen in TenureStarted/Recovered/HandedOff/RunStarted
	ownerAt  map[string]time.Time
	events   map[signals.EventKind]int
	// owners named by a Redis call that failed (outcome unknown), first
	// failure; takeovers: tenure events of such an owner first seen after
	all       []signals.Event
	failed    map[string]time.Time
	takeovers map[string]time.Time
}

type loadGiven struct {
	at          time.Time
	redelivered bool
	done        bool
	proc        string
}

func newLoadLog() *loadLog {
	return &loadLog{given: map[string][]loadGiven{}, active: map[string]int{}, starts: map[string][]time.Time{},
		owners: map[string]bool{}, ownerAt: map[string]time.Time{}, events: map[signals.EventKind]int{},
		failed: map[string]time.Time{}, takeovers: map[string]time.Time{}}
}

func (l *loadLog) observe(e signals.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events[e.Kind]++
	if strings.HasPrefix(e.Thread, "busy-") {
		l.all = append(l.all, e)
	}
	switch e.Kind {
	case signals.TenureStarted, signals.Recovered, signals.HandedOff, signals.RunStarted:
		if e.Owner != "" && !l.owners[e.Owner] {
			if _, f := l.failed[e.Owner]; f && (e.Kind == signals.TenureStarted || e.Kind == signals.Recovered) {
				l.takeovers[e.Owner] = e.Time
			}
			l.owners[e.Owner] = true
			l.ownerAt[e.Owner] = e.Time
		}
	}
}

// checkGivenOnce fails t for each signal of given (per signal ID, each time
// an agent was given it) given more than once without being marked
// Redelivered (the first ten are named), and returns how many were given
// more than once, all but once marked Redelivered (flagged), and how many
// were not (unflagged).
func checkGivenOnce(t *testing.T, given map[string][]loadGiven) (flagged, unflagged int) {
	t.Helper()
	for id, gs := range given {
		fresh := 0
		for _, g := range gs {
			if !g.redelivered {
				fresh++
			}
		}
		if fresh > 1 {
			unflagged++
			if unflagged <= 10 {
				t.Errorf("signal %s given %d times without Redelivered: %+v", id, fresh, gs)
			}
		} else if len(gs) > 1 {
			flagged++
		}
	}
	return flagged, unflagged
}

// agent runs each run's first signals (busy-* threads: 1-3s each, others
// 0-5ms) and returns, so that queued signals go by hand-off.
func (l *loadLog) agent(proc string) signals.Agent {
	return func(ctx context.Context, r *signals.Run) error {
		now := time.Now()
		l.mu.Lock()
		l.active[r.Thread]++
		if n := l.active[r.Thread]; n > 1 {
			l.overlaps = append(l.overlaps, fmt.Sprintf("%s: %d agents at once at %s (run %s on %s)", r.Thread, n, now.Format("15:04:05.000"), r.ID, proc))
		}
		l.starts[r.Thread] = append(l.starts[r.Thread], now)
		idx := map[string]int{}
		for i, s := range r.Signals {
			red := i < len(r.Redelivered) && r.Redelivered[i]
			l.given[s.ID] = append(l.given[s.ID], loadGiven{at: now, redelivered: red, proc: proc})
			idx[s.ID] = len(l.given[s.ID]) - 1
		}
		l.mu.Unlock()
		d := time.Duration(rand.IntN(5)) * time.Millisecond
		if strings.HasPrefix(r.Thread, "busy-") {
			d = time.Second + time.Duration(rand.IntN(2000))*time.Millisecond
		}
		done := false
		select {
		case <-time.After(d):
			done = true
		case <-ctx.Done():
		}
		l.mu.Lock()
		l.active[r.Thread]--
		if done {
			for id, i := range idx {
				l.given[id][i].done = true
			}
		}
		l.mu.Unlock()
		return nil
	}
}

var loadOwnerRE = regexp.MustCompile(`^[ABC]/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

func (l *loadLog) noteFailed(cmds ...redis.Cmder) {
	now := time.Now()
	for _, c := range cmds {
		if err := c.Err(); err == nil || errors.Is(err, redis.Nil) {
			continue
		}
		for _, a := range c.Args() {
			if s, ok := a.(string); ok && loadOwnerRE.MatchString(s) {
				l.mu.Lock()
				if _, ok := l.failed[s]; !ok {
					l.failed[s] = now
				}
				l.mu.Unlock()
			}
		}
	}
}

func (l *loadLog) DialHook(next redis.DialHook) redis.DialHook { return next }

func (l *loadLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		l.noteFailed(cmd)
		return err
	}
}

func (l *loadLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		l.noteFailed(cmds...)
		return err
	}
}

type loadSend struct {
	id, thread string
	start, end time.Time
	err        error
}

// loadSender drives the sends of a load test over its runtimes and records
// each one (loadSend) and the runtime that sent it.
type loadSender struct {
	rts []*signals.Runtime

	mu    sync.Mutex
	sends []loadSend
	proc  map[string]string // signal ID → the ProcessID of the runtime that sent it

	// slow, when set (before the first send), is called from a goroutine
	// of its own when a Send has not returned slowAfter after it began,
	// while it still runs: a test that wants what the Send waits for (a
	// goroutine dump) takes it there.
	slow      func(rt, thread, id string, began time.Time)
	slowAfter time.Duration
}

func newLoadSender(rts ...*signals.Runtime) *loadSender {
	return &loadSender{rts: rts, proc: map[string]string{}}
}

// send sends signal id to thread th from runtime i with a ctx of d.
func (l *loadSender) send(i int, th, id string, d time.Duration) {
	sctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	st := time.Now()
	if l.slow != nil {
		p := l.rts[i].ProcessID()
		tm := time.AfterFunc(l.slowAfter, func() { l.slow(p, th, id, st) })
		defer tm.Stop()
	}
	_, err := l.rts[i].Send(sctx, th, signals.Signal{ID: id, Type: "t"})
	l.mu.Lock()
	l.sends = append(l.sends, loadSend{id, th, st, time.Now(), err})
	l.proc[id] = l.rts[i].ProcessID()
	l.mu.Unlock()
}

// warmUp sends one signal to each of short threads "short-i" from each
// runtime, then perBusy signals to each of busy threads "busy-i", queued in
// order from one sender per thread (a random runtime each), and returns
// once all were sent.
func (l *loadSender) warmUp(short, busy, perBusy int) {
	var wg sync.WaitGroup
	for i := range short {
		for j := range l.rts {
			wg.Go(func() { l.send(j, fmt.Sprint("short-", i), fmt.Sprint("warm-", i, "-", j), 10*time.Second) })
		}
	}
	wg.Wait()
	for i := range busy {
		wg.Go(func() {
			for k := range perBusy {
				l.send(rand.IntN(len(l.rts)), fmt.Sprint("busy-", i), fmt.Sprint("b", i, "-", k), 10*time.Second)
			}
		})
	}
	wg.Wait()
}

// stream starts senders goroutines that send signals "s<k>" with a ctx of
// d, each to a random short thread (every 40th to a random busy thread),
// from the runtime pick returns, 0-20ms apart, until the returned stop is
// called; stop waits for them.
func (l *loadSender) stream(senders, short, busy int, d time.Duration, pick func() int) (stop func()) {
	return l.streamTo(senders, "s", d, func(k int64) string {
		if k%40 == 0 { // some to the busy threads too
			return fmt.Sprint("busy-", rand.IntN(busy))
		}
		return fmt.Sprint("short-", rand.IntN(short))
	}, pick)
}

// streamTo is stream with signals "<idPrefix><k>", the k-th (from 1) to
// the thread thread(k) returns; streams running at once need distinct
// prefixes.
func (l *loadSender) streamTo(senders int, idPrefix string, d time.Duration, thread func(k int64) string, pick func() int) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var n atomic.Int64
	for range senders {
		wg.Go(func() {
			for ctx.Err() == nil {
				k := n.Add(1)
				l.send(pick(), thread(k), fmt.Sprint(idPrefix, k), d)
				time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond)
			}
		})
	}
	return func() { cancel(); wg.Wait() }
}

// all returns the sends so far.
func (l *loadSender) all() []loadSend {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.sends)
}

// TestLateLeasesUnderLoad checks, under load, the promises about late
// leases (givenup.go, doc.go "What a user must know first", README's
// signals paragraph): 3 runtimes on NewURL default clients, 20 busy threads
// (runs of 1-3s, 6 signals queued on each, handed off), 120 threads fed
// short signals by 6 senders; the redis-server is stopped (SIGSTOP) for
// 5s mid-load. Asserts: every accepted Send's signal runs; no thread has two
// agents at once; a signal is given again only flagged Redelivered; every
// thread with accepted signals not yet run at the resume (among them those
// leased by late calls to runs that never start) starts a run within TTL +
// recovery + max run (3s) + 5s slack of the resume. Written by review revP
// (helper 21, thirteenth pass), with 12 signals queued on each busy thread
// and every 10th send of the senders to a busy thread (here 6 and every
// 40th, to keep the suite's time: 177s with -race before): 20 of 20
// runs passed; with the stall longer
// than the TTL, 29-329 Sends failed, 67-209 calls of unknown outcome were
// remembered, up to 95 late leases were taken over 1.9-3.2s after the
// resume, follow-ups to them ran 0.3-0.65s after their Send (not the idle
// 7-15ms: the machine is busy), and 12-21 signals per run were given twice,
// marked Redelivered (their runs' leases were lost in the stall). Twice a
// busy thread waited about one TTL (8.0s, 8.1s of 8s) after the resume
// with the stall shorter than the TTL, within the bound; see
// TestHandOffReplyLostIsAdopted/ReleaseFails.
func TestLateLeasesUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("a 40s load test: skipped under -short")
	}
	for _, tc := range []struct {
		name  string
		ttl   time.Duration
		stall time.Duration
	}{
		{"StallLongerThanTTL", 3 * time.Second, 5 * time.Second},
		{"StallShorterThanTTL", 8 * time.Second, 5 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) { lateLeasesUnderLoad(t, tc.ttl, tc.stall) })
	}
}

func lateLeasesUnderLoad(t *testing.T, ttl, stall time.Duration) {
	srv, _ := startRedis(t)
	ctx := context.Background()
	const (
		recovery   = 500 * time.Millisecond
		busy       = 20
		perBusy    = 6
		short      = 120
		senders    = 6
		sendCtx    = time.Second
		maxRun     = 3 * time.Second
		slack      = 5 * time.Second
		prefix     = "lateload"
		finalBound = 120 * time.Second
	)
	lg := newLoadLog()
	var rts []*signals.Runtime
	for _, id := range []string{"A", "B", "C"} {
		rt, _ := urlRuntime(t, srv.URL(), prefix, id, lg.agent(id), lg,
			signals.WithLeaseTTL(ttl), signals.WithRecoveryInterval(recovery),
			signals.WithLinger(300*time.Millisecond), signals.WithObserver(lg.observe))
		rts = append(rts, rt)
	}
	look, err := redisstreams.NewURL(ctx, srv.URL(), redisstreams.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer look.Close()

	ls := newLoadSender(rts...)
	send := func(rt *signals.Runtime, th, id string, d time.Duration) {
		ls.send(slices.Index(rts, rt), th, id, d)
	}
	ls.warmUp(short, busy, perBusy)
	stopSends := ls.stream(senders, short, busy, sendCtx, func() int { return rand.IntN(len(rts)) })
	defer stopSends()
	time.Sleep(3 * time.Second)
	paused := time.Now()
	srv.Pause(t)
	resumedOK := false
	t.Cleanup(func() {
		if !resumedOK {
			srv.Resume(t)
		}
	})
	// A burst of Sends while the server is stopped: fresh threads and
	// short ones, ctx 300ms-2s (their acquires, written or not, end with
	// an unknown outcome).
	const burst = 150
	var bwg sync.WaitGroup
	time.Sleep(300 * time.Millisecond)
	for i := range burst {
		bwg.Go(func() {
			d := 300*time.Millisecond + time.Duration(rand.IntN(1700))*time.Millisecond
			send(rts[i%len(rts)], fmt.Sprint("burst-", i), fmt.Sprint("x", i, "-1"), d)
		})
		bwg.Go(func() {
			d := 300*time.Millisecond + time.Duration(rand.IntN(1700))*time.Millisecond
			send(rts[rand.IntN(len(rts))], fmt.Sprint("short-", rand.IntN(short)), fmt.Sprint("y", i), d)
		})
	}
	time.Sleep(stall - 300*time.Millisecond)
	srv.Resume(t)
	resumedOK = true
	resumed := time.Now()
	// Late leases: threads leased (shortly after the resume, and still a
	// second later) to an owner no run was seen for.
	allThreads := []string{}
	for i := range busy {
		allThreads = append(allThreads, fmt.Sprint("busy-", i))
	}
	for i := range short {
		allThreads = append(allThreads, fmt.Sprint("short-", i))
	}
	for i := range burst {
		allThreads = append(allThreads, fmt.Sprint("burst-", i))
	}
	time.Sleep(300 * time.Millisecond)
	ownersAt := map[string]string{}
	unseen := func() map[string]string {
		m := map[string]string{}
		for _, th := range allThreads {
			lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			o, err := look.GetLeaseOwner(lctx, signals.LeaseKey(th))
			cancel()
			if err != nil || o == "" {
				continue
			}
			if _, ok := ownersAt[th]; !ok {
				ownersAt[th] = o
			}
			lg.mu.Lock()
			seen := lg.owners[o]
			lg.mu.Unlock()
			if !seen {
				m[th] = o
			}
		}
		return m
	}
	u1 := unseen()
	time.Sleep(time.Second)
	u2 := unseen()
	late := map[string]string{}
	for th, o := range u1 {
		if u2[th] == o {
			late[th] = o
		}
	}
	// A follow-up to every burst thread, from a random runtime.
	for i := range burst {
		bwg.Go(func() {
			send(rts[rand.IntN(len(rts))], fmt.Sprint("burst-", i), fmt.Sprint("x", i, "-2"), 10*time.Second)
		})
	}
	time.Sleep(3 * time.Second)
	stopSends()
	bwg.Wait()
	sendsEnd := time.Now()

	// Every accepted signal runs.
	all := ls.all()
	accepted := map[string]loadSend{}
	var failed, failedStall, ctxErrs int
	for _, s := range all {
		if s.err == nil {
			accepted[s.id] = s
		} else {
			failed++
			if s.end.After(paused) && s.start.Before(resumed) {
				failedStall++
			}
			if strings.Contains(s.err.Error(), "deadline") {
				ctxErrs++
			}
		}
	}
	deadline := sendsEnd.Add(finalBound)
	for {
		missing := 0
		lg.mu.Lock()
		for id := range accepted {
			if len(lg.given[id]) == 0 {
				missing++
			}
		}
		lg.mu.Unlock()
		if missing == 0 {
			break
		}
		if time.Now().After(deadline) {
			var ids []string
			lg.mu.Lock()
			for id, s := range accepted {
				if len(lg.given[id]) == 0 {
					ids = append(ids, fmt.Sprintf("%s(%s, sent %s)", id, s.thread, s.start.Format("15:04:05.000")))
				}
			}
			lg.mu.Unlock()
			sort.Strings(ids)
			t.Errorf("%d accepted signals never ran within %v of the senders' stop: %v", missing, finalBound, ids[:min(len(ids), 30)])
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(time.Second)

	lg.mu.Lock()
	defer lg.mu.Unlock()
	for _, o := range lg.overlaps {
		t.Errorf("two agents at once: %s", o)
	}
	dupFlagged, dupUnflagged := checkGivenOnce(t, lg.given)
	for id, gs := range lg.given {
		doneN := 0
		for _, g := range gs {
			if g.done {
				doneN++
			}
		}
		if doneN > 1 {
			t.Logf("signal %s finished %d times (%+v)", id, doneN, gs)
		}
	}
	// Threads with accepted signals not given by the resume: first run
	// start after the resume.
	bound := ttl + recovery + maxRun + slack
	var maxDelay time.Duration
	var maxTh string
	waitedTTL := 0
	pending := 0
	for _, th := range allThreads {
		has := false
		for id, s := range accepted {
			if s.thread != th {
				continue
			}
			gs := lg.given[id]
			if len(gs) == 0 || gs[0].at.After(resumed) {
				if s.start.Before(resumed) {
					has = true
					break
				}
			}
		}
		if !has {
			continue
		}
		pending++
		var first time.Time
		for _, st := range lg.starts[th] {
			if st.After(resumed) {
				first = st
				break
			}
		}
		if first.IsZero() {
			t.Errorf("thread %s (late lease %q) had accepted signals pending at the resume and no run started after it", th, late[th])
			continue
		}
		d := first.Sub(resumed)
		if d > maxDelay {
			maxDelay, maxTh = d, th
		}
		if _, ok := late[th]; ok && d >= ttl {
			waitedTTL++
			t.Logf("late-leased thread %s (owner %s) waited %v (>= TTL %v) for its next run", th, late[th], d.Round(time.Millisecond), ttl)
		}
		if d >= ttl && strings.HasPrefix(th, "busy-") {
			t.Logf("busy thread %s idle %v after the resume (>= TTL); lease owner at resume+0.3s %q; its events from 1s before the pause:", th, d.Round(time.Millisecond), ownersAt[th])
			for _, e := range lg.all {
				if e.Thread == th && e.Time.After(paused.Add(-time.Second)) && e.Time.Before(first.Add(time.Second)) {
					t.Logf("  %+8.3fs %-14s %s owner=%s token=%d prev=%s/%d err=%v", e.Time.Sub(resumed).Seconds(), e.Kind, e.Process, e.Owner, e.Token, e.PrevOwner, e.PrevToken, e.Err)
				}
			}
		}
		if d > bound {
			t.Errorf("thread %s (late lease %q): first run %v after the resume, bound TTL+recovery+maxRun+slack %v", th, late[th], d.Round(time.Millisecond), bound)
		}
	}
	// Latency of accepted signals to non-busy threads sent after the
	// resume: Send start to first given.
	type lat struct {
		id, th string
		d      time.Duration
	}
	var lats []lat
	for id, s := range accepted {
		if strings.HasPrefix(s.thread, "busy-") || s.start.Before(resumed) {
			continue
		}
		gs := lg.given[id]
		if len(gs) == 0 {
			continue
		}
		lats = append(lats, lat{id, s.thread, gs[0].at.Sub(s.start)})
	}
	sort.Slice(lats, func(i, j int) bool { return lats[i].d > lats[j].d })
	over1s, overTTL := 0, 0
	for _, l := range lats {
		if l.d > time.Second {
			over1s++
		}
		if l.d >= ttl {
			overTTL++
		}
		if l.d > ttl+recovery+slack {
			t.Errorf("signal %s to %s (late lease %q) ran %v after its Send, bound TTL+recovery+slack %v", l.id, l.th, late[l.th], l.d.Round(time.Millisecond), ttl+recovery+slack)
		}
	}
	if len(lats) > 0 {
		top := []string{}
		for _, l := range lats[:min(8, len(lats))] {
			_, isLate := late[l.th]
			top = append(top, fmt.Sprintf("%s@%s %v late=%v", l.id, l.th, l.d.Round(time.Millisecond), isLate))
		}
		t.Logf("post-resume signals to non-busy threads: %d, >1s: %d, >=TTL: %d, slowest: %v", len(lats), over1s, overTTL, top)
	}
	// Late-lease threads: when their late owner's lease was taken over (the
	// owner then shows in a tenure event) and their run delay.
	taken := 0
	var lateList []string
	for th, o := range late {
		at, ok := lg.ownerAt[o]
		s := "not taken over"
		if ok {
			taken++
			s = fmt.Sprintf("taken over %v after the resume", at.Sub(resumed).Round(time.Millisecond))
		}
		lateList = append(lateList, fmt.Sprintf("%s=%s (%s)", th, o, s))
	}
	sort.Strings(lateList)
	var signalsSent int
	for range all {
		signalsSent++
	}
	t.Logf("sends %d, accepted %d, failed %d (%d spanning the stall, %d ctx deadline)", signalsSent, len(accepted), failed, failedStall, ctxErrs)
	t.Logf("late leases seen after the resume (owner with no run yet, still 1s later): %d, taken over (owner later in a tenure event): %d; %v", len(late), taken, lateList)
	t.Logf("threads pending at the resume: %d; max delay to the first run after the resume: %v (%s); late-leased threads that waited >= TTL: %d", pending, maxDelay.Round(time.Millisecond), maxTh, waitedTTL)
	// unknown-outcome owners (failed calls naming an owner never seen
	// before the failure) and their takeovers
	unknown := 0
	var maxTake time.Duration
	for o, at := range lg.failed {
		if first, ok := lg.ownerAt[o]; ok && first.Before(at) && lg.takeovers[o].IsZero() {
			continue // a live run's renewal etc.
		}
		unknown++
	}
	for _, at := range lg.takeovers {
		if d := at.Sub(resumed); d > maxTake {
			maxTake = d
		}
	}
	// Empty tenures after the resume: a tenure (TenureStarted/Recovered)
	// whose owner started no run: what a takeover of a never-started run's
	// lease looks like when nothing waits (it reads the inbox, releases).
	t.Logf("failed calls naming a run that had not started (hook; unknown outcome): %d; takeovers (tenure event for such an owner): %d, latest %v after the resume", unknown, len(lg.takeovers), maxTake.Round(time.Millisecond))
	t.Logf("duplicates: %d flagged Redelivered, %d unflagged; events: %v", dupFlagged, dupUnflagged, lg.events)
}
