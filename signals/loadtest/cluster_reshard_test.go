package loadtest_test

import (
	"cmp"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/keys"
	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

// TestClusterReshardUnderLoad moves hash slots of a 3-master Redis Cluster
// from one master to another, as `redis-cli --cluster reshard` does, while
// three runtimes (each on its own ClusterClient with go-redis's defaults
// and redisstreams.New, as users run them) carry the load of
// TestClusterFailoverUnderLoad: 20 busy threads with runs of 1-3s and 2
// signals queued on each, 80 threads of short signals sent continuously
// from every runtime (every 200th signal to a busy thread). Each move
// marks the slot IMPORTING and MIGRATING, migrates half of its keys,
// waits, migrates the rest, waits, and assigns the slot
// (redistest.SlotMove): about 1.2s in which the slot's multi-key commands,
// the lease scripts and the guarded inbox reads among them, fail with
// TRYAGAIN or ASK. The slots moved hold a busy thread's lease and inbox
// (one hash slot per thread), a short thread's, another's done record,
// and the work topic (every Send's wake notice); each move of a thread's
// slot begins right after two signals were sent to that thread, so that a
// tenure holds its lease while the slot moves. Unlike a
// failover, a resharding loses no write, so the guarantees hold whole
// (redisstreams/doc.go: lease calls of a migrating slot fail until the
// migration ends; a lease whose slot migrates longer than its TTL, here
// 3s, is lost, failing closed). Asserted:
//
//  1. no Send hangs: each returns within its ctx (2s; the warm-up's 10s)
//     + 1s; a Send fails only when its ctx ended before a move it met did
//     (+ 0.5s): its lease calls wait for the move (redisstreams/doc.go);
//     and every Send begun sendBackBound (2s) after the last move ended
//     returns nil;
//  2. every signal of a Send that returned nil is given to an agent, more
//     than once only marked Redelivered; one to a short thread, accepted
//     during the moves, within the longest move + TTL + the recovery
//     interval + 2s of its Send's return (a busy thread's wait in its
//     queue is reported);
//  3. no two runs of a thread at once, and a thread's runs have rising
//     fencing tokens in the order they started;
//  4. once sends stop, every lease is free and every inbox group and the
//     work group drain (checkSettled); each Close returns within TTL + 1s;
//  5. no done-record write failed: a write that meets the moving slot is
//     tried again until the move ends (before that, 4-20 writes per run
//     failed at their first TRYAGAIN and left their signals out of the
//     record).
//
// Lease losses (LeaseLost events) and the Sends that failed during the
// moves are reported as figures.
//
// 2026-11-29, on the shared 2-core machine under -race, these settings:
// 17-22s; each move 1.2-1.3s, each thread's lease held by a tenure as its
// move began; 5,000-5,200 Sends, none failed, the slowest 1.1-1.3s (a Send
// to short-0 whose acquire waited for its slot's move: 3 runs); every
// accepted signal given, none twice; no overlap, no token out of order, no
// lease lost; a signal to a short thread accepted during the moves given
// at most 1.2-1.4s after its Send returned (bound about 6.8s). Before the
// lease calls waited for a move (redisstreams/leasemigrating.go), 1-5 Sends
// per run failed during the moves, each with TRYAGAIN or ASK from the
// acquire of a thread whose slot moved.
//
// Faults injected into the library did not make it fail: with
// reloadOnFailure disabled, and with a group subscription that stops
// reading at its first TRYAGAIN, the runtime recovered by other paths
// (go-redis reloads its map of slots on MOVED itself; a stuck inbox
// tenure is recovered). It shows the guarantees hold through a
// resharding; it is not a regression test of those two mechanisms. It is
// one of the done record's retries (5): with them taken out (writeRecord
// failing at its first error) it failed, 6 writes failed; with them, 2
// runs of 2026-11-29 had none. It is one of the lease calls' waits (1):
// with them taken out (whileMigrating returning the first refusal) it
// failed: 2 Sends failed with TRYAGAIN in the run of 2026-11-29.
func TestClusterReshardUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("a 20s resharding load test: skipped under -short")
	}
	cl := redistest.StartCluster(t, 3)
	const (
		ttl           = 3 * time.Second
		recovery      = 500 * time.Millisecond
		busy          = 20
		perBusy       = 2
		short         = 80
		senders       = 6
		sendCtx       = 2 * time.Second
		prefix        = "reshard"
		movePause     = 600 * time.Millisecond // twice per move
		sendBackBound = 2 * time.Second
		moveSlack     = 500 * time.Millisecond // a retry's backoff (up to 200ms) and its round trip
		afterMoves    = 3 * time.Second
	)
	logs := newLogCount()
	lg := &bhLog{given: map[string][]loadGiven{}}
	var (
		evMu     sync.Mutex
		lost     []string
		observed = map[signals.EventKind]int{}
	)
	observe := func(e signals.Event) {
		evMu.Lock()
		defer evMu.Unlock()
		observed[e.Kind]++
		if e.Kind == signals.LeaseLost {
			lost = append(lost, fmt.Sprintf("%s on %s at %s: %v", e.Thread, e.Owner, e.Time.Format("15:04:05.000"), e.Err))
		}
	}
	runs := startLoadRuns(t, func() redis.UniversalClient { return cl.Client(t) }, redisstreams.Options{Prefix: prefix}, lg, logs, ttl, recovery,
		signals.WithObserver(observe))
	rts := runs.rts
	look, err := redisstreams.New(cl.Client(t), redisstreams.Options{Prefix: prefix, Logger: slog.New(logs)})
	if err != nil {
		t.Fatal(err)
	}
	defer look.Close()
	space, err := keys.NewSpace(prefix)
	if err != nil {
		t.Fatal(err)
	}

	ls := newLoadSender(rts...)
	ls.warmUp(short, busy, perBusy) // each Send with a ctx of 10s
	warmEnd := time.Now()
	// Every 200th signal to a busy thread (stream sends every 40th): its
	// queue (one signal per run of 1-3s) stays short, and so the test.
	stopSends := ls.streamTo(senders, "s", sendCtx, func(k int64) string {
		if k%200 == 0 {
			return fmt.Sprint("busy-", rand.IntN(busy))
		}
		return fmt.Sprint("short-", rand.IntN(short))
	}, func() int { return rand.IntN(len(rts)) })
	defer stopSends()
	time.Sleep(2 * time.Second)

	// The moves, one after the other, each of a slot that holds keys by
	// now (the warm-up ran every thread once).
	// A move of a thread's slot begins right after two signals were sent
	// to the thread, so that a tenure holds its lease (a busy thread's run
	// lasts 1-3s) or writes its done record while the slot moves.
	moves := []struct{ what, key, thread string }{
		{"busy-0's lease and inbox", space.Lease(signals.LeaseKey("busy-0")), "busy-0"},
		{"short-0's lease and inbox", space.Stream(signals.InboxTopic("short-0")), "short-0"},
		{"short-1's done record", space.Lease("signals.done.short-1"), "short-1"},
		{"the work topic", space.Stream(signals.WorkTopic), ""},
	}
	firstMove := time.Now()
	type moved struct {
		what        string
		slot, keys  int
		from, to    string
		took        time.Duration
		began, done time.Time
		holder      string // the thread's lease holder as the move began
	}
	var done []moved
	for i, mv := range moves {
		holder := ""
		if mv.thread != "" {
			for j := range 2 {
				ls.send(rand.IntN(len(rts)), mv.thread, fmt.Sprint("mv", i, "-", j), sendCtx)
			}
			o, err := look.GetLeaseOwner(t.Context(), signals.LeaseKey(mv.thread))
			if err != nil {
				t.Fatalf("lease owner of %s: %v", mv.thread, err)
			}
			holder = cmp.Or(o, "nobody")
		}
		began := time.Now()
		m := cl.StartSlotMove(t, mv.key)
		ks := m.Keys(1000)
		if len(ks) == 0 {
			t.Fatalf("slot %d of %s (%s) holds no key", m.Slot, mv.what, mv.key)
		}
		m.Migrate(ks[:(len(ks)+1)/2]...)
		time.Sleep(movePause)
		for m.MigrateRest() > 0 {
			// until none is left on the source (while the slot migrates,
			// a key it does not hold is created on the target)
		}
		time.Sleep(movePause)
		m.Finish()
		done = append(done, moved{mv.what, m.Slot, m.Moved(), m.From, m.To, time.Since(began), began, time.Now(), holder})
	}
	movesEnd := time.Now()
	time.Sleep(afterMoves)
	stopSends()
	sendsEnd := time.Now()
	for _, d := range done {
		t.Logf("moved slot %d (%s, %d keys; the thread's lease held by %s as it began) from %s to %s in %v, from %+.3fs after the first move began",
			d.slot, d.what, d.keys, cmp.Or(d.holder, "-"), d.from, d.to, d.took.Round(time.Millisecond), d.began.Sub(firstMove).Seconds())
	}

	// 1. No Send hangs; every Send begun sendBackBound after the moves
	// returned nil.
	all := ls.all()
	accepted := map[string]loadSend{}
	var failed, failedDuring, slowest int
	var slowestD time.Duration
	var failures []string
	for i, x := range all {
		if d := x.end.Sub(x.start); d > slowestD {
			slowest, slowestD = i, d
		}
		ctxOf := sendCtx
		if x.start.Before(warmEnd) {
			ctxOf = 10 * time.Second // the warm-up's
		}
		if d := x.end.Sub(x.start); d > ctxOf+time.Second {
			t.Errorf("Send of %s to %s by %s took %v (ctx %v), begun %+.3fs from the first move: %v",
				x.id, x.thread, ls.proc[x.id], d.Round(time.Millisecond), ctxOf, x.start.Sub(firstMove).Seconds(), x.err)
		}
		if x.err == nil {
			accepted[x.id] = x
			continue
		}
		failed++
		if !x.end.Before(firstMove) && !x.start.After(movesEnd) {
			failedDuring++
		}
		if len(failures) < 5 {
			failures = append(failures, fmt.Sprintf("%s to %s, begun %+.3fs: %v", x.id, x.thread, x.start.Sub(firstMove).Seconds(), x.err))
		}
		if x.start.After(movesEnd.Add(sendBackBound)) {
			t.Errorf("Send of %s to %s by %s, begun %v after the last move ended, failed: %v",
				x.id, x.thread, ls.proc[x.id], x.start.Sub(movesEnd).Round(time.Millisecond), x.err)
		}
		// A lease call of a migrating slot waits for the move to end,
		// within its ctx: a Send fails only when its ctx ended before the
		// move it met did (with moveSlack for the retries' backoff).
		excused := false
		for _, d := range done {
			if !x.end.Before(d.began) && !x.start.After(d.done) && x.start.Add(ctxOf).Before(d.done.Add(moveSlack)) {
				excused = true
			}
		}
		if !excused {
			t.Errorf("Send of %s to %s by %s, begun %+.3fs from the first move with a ctx of %v, failed though no move it met outlasted its ctx: %v",
				x.id, x.thread, ls.proc[x.id], x.start.Sub(firstMove).Seconds(), ctxOf, x.err)
		}
	}

	// 2. Every accepted signal is given.
	lg.waitGiven(t, accepted, ls.proc, func(loadSend) bool { return true }, firstMove, "the first move", sendsEnd.Add(30*time.Second))
	allGiven := time.Now()

	// 4a. Nothing stuck.
	allThreads := loadThreads(busy, short)
	checkSettled(t, look, allThreads, 30*time.Second)
	settled := time.Since(allGiven)
	// 4b. Close.
	closeTimes := runs.closeAll(t, ttl)

	lg.mu.Lock()
	defer lg.mu.Unlock()
	flagged, unflagged := checkGivenOnce(t, lg.given)
	// 3. One run of a thread at a time, tokens rising.
	var overlaps, tokenBack int
	for th, rs := range lg.byThread() {
		for _, o := range runOverlaps(th, rs, firstMove, "the first move") {
			overlaps++
			if overlaps <= 10 {
				t.Errorf("runs at once: %s", o)
			}
		}
		for i := 1; i < len(rs); i++ {
			if rs[i].token <= rs[i-1].token {
				tokenBack++
				if tokenBack <= 10 {
					t.Errorf("%s: run %s on %s (token %d, %+.3fs from the first move) started after run %s on %s (token %d)",
						th, rs[i].id, rs[i].proc, rs[i].token, rs[i].start.Sub(firstMove).Seconds(), rs[i-1].id, rs[i-1].proc, rs[i-1].token)
				}
			}
		}
	}
	// How long signals sent during the moves waited to be given, short
	// threads apart (busy threads take one signal per run of 1-3s: a
	// queue, whatever the moves).
	var waits []time.Duration
	var slowShort time.Duration
	var slowShortDesc string
	for id, x := range accepted {
		gs := lg.given[id]
		if len(gs) == 0 || x.start.Before(firstMove) || x.start.After(movesEnd) {
			continue
		}
		d := gs[0].at.Sub(x.end)
		waits = append(waits, d)
		if strings.HasPrefix(x.thread, "short-") && d > slowShort {
			slowShort, slowShortDesc = d, fmt.Sprintf("%s to %s, sent %+.3fs from the first move", id, x.thread, x.start.Sub(firstMove).Seconds())
		}
	}
	sort.Slice(waits, func(i, j int) bool { return waits[i] < waits[j] })
	var longestMove time.Duration
	for _, d := range done {
		longestMove = max(longestMove, d.took)
	}
	if bound := longestMove + ttl + recovery + 2*time.Second; slowShort > bound {
		t.Errorf("a signal to a short thread accepted during the moves was given %v after its Send returned (%s), bound %v (the longest move + TTL + recovery interval + 2s)",
			slowShort.Round(time.Millisecond), slowShortDesc, bound.Round(time.Millisecond))
	}
	evMu.Lock()
	defer evMu.Unlock()
	t.Logf("sends: %d, accepted %d, failed %d (%d during the moves; first: %v); slowest Send %v (%s to %s)",
		len(all), len(accepted), failed, failedDuring, failures, slowestD.Round(time.Millisecond), all[slowest].id, all[slowest].thread)
	if n := len(waits); n > 0 {
		t.Logf("signals accepted during the moves: %d, from Send's return to given: median %v, p99 %v, max %v; to a short thread at most %v (%s)",
			n, waits[n/2].Round(time.Millisecond), waits[n*99/100].Round(time.Millisecond), waits[n-1].Round(time.Millisecond), slowShort.Round(time.Millisecond), slowShortDesc)
	}
	t.Logf("runs %d; given twice, marked Redelivered: %d (unmarked: %d); overlaps %d; tokens not rising %d; lease losses %d %v",
		len(lg.runs), flagged, unflagged, overlaps, tokenBack, len(lost), lost[:min(len(lost), 5)])
	t.Logf("events %v; all given %v after the sends stopped; settled %v after; Close %v",
		observed, allGiven.Sub(sendsEnd).Round(time.Millisecond), settled.Round(time.Millisecond), closeTimes)
	logTop(t, logs, 8)
	logs.mu.Lock()
	recFailed := logs.n[slog.LevelWarn.String()+" signals: writing the done record failed"]
	logs.mu.Unlock()
	if recFailed > 0 {
		t.Errorf("%d done-record writes failed (their signals ran, but a duplicate Send of them may run again)", recFailed)
	}
}
