package signals_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

// h71Ran records which signals ran where.
type h71Ran struct {
	mu   sync.Mutex
	byID map[string][]string // thread/id → processes that ran it
	cond *sync.Cond
}

func newH71Ran() *h71Ran {
	r := &h71Ran{byID: map[string][]string{}}
	r.cond = sync.NewCond(&r.mu)
	return r
}

func (r *h71Ran) add(thread, id, proc string) {
	r.mu.Lock()
	r.byID[thread+"/"+id] = append(r.byID[thread+"/"+id], proc)
	r.mu.Unlock()
}

func (r *h71Ran) has(thread, id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.byID[thread+"/"+id]) > 0
}

func (r *h71Ran) await(t *testing.T, thread, id string, bound time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(bound); !r.has(thread, id); {
		if time.Now().After(deadline) {
			t.Fatalf("%s/%s did not run within %v", thread, id, bound)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestReviewH71SignalsFootprint (review h71): "What a thread leaves
// behind", under a mixed workload on one redis-server with runtimes on
// redisstreams.NewURL backends (default pool): runtimes A and B (live) and
// K (its client behind a proxy), and a Controller. Threads of four kinds:
//
//   - n plain threads, each sent three signals, from A or B;
//   - n/10 threads whose running run is cancelled with DropQueued by the
//     Controller while two signals wait behind it, then sent one more;
//   - 50 threads K holds in runs that hang when K's network is
//     black-holed for good (a process cut off without Close), each with a
//     signal queued behind its run; a live runtime takes them over;
//   - 50 threads nobody ever sent to, cancelled with DropQueued (the mark
//     creates their inboxes).
//
// Once everything ran and the windows passed (dedupe window, FenceIdle and
// the lease status window, 1s each; the inbox expiry floor lowered), it
// requires, by SCAN (with PTTL) and XINFO GROUPS/CONSUMERS, that only the
// work and control topics are left, besides read guards expiring within 10
// minutes (the live runtimes', and the dead process's), and that the work
// group holds no pending entry and no consumer but the runtimes'; in
// process, that every table of A and B that follows live work is empty,
// and it logs the sizes of those that are caches. After A and B close,
// their read guards and consumers are gone.
func TestReviewH71SignalsFootprint(t *testing.T) {
	n := 1000
	if testing.Short() {
		n = 200
	}
	if v := os.Getenv("LEASEBUS_H71_THREADS"); v != "" {
		n, _ = strconv.Atoi(v)
	}
	srv, c := startRedis(t)
	ctx := context.Background()
	const prefix = "h71s"
	heapInuse := func() uint64 {
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return ms.HeapInuse
	}
	heap0, g0 := heapInuse(), runtime.NumGoroutine()
	quiet := slog.New(slog.DiscardHandler)
	bopts := redisstreams.Options{Prefix: prefix, FenceIdle: time.Second, LeaseStatusWindow: time.Second, BlockTime: 100 * time.Millisecond, Logger: quiet}
	newBackend := func(url string) *redisstreams.Backend {
		b, err := redisstreams.NewURL(ctx, url, bopts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		return b
	}
	ran := newH71Ran()
	// Runs that hang until their ctx ends: the cancelled threads' first
	// signal anywhere, the killed owner's threads' first signal on K only
	// (a live runtime that takes the thread over runs it).
	hang := func(thread, proc string) bool {
		return strings.HasPrefix(thread, "c") || strings.HasPrefix(thread, "k") && proc == "K"
	}
	agentOf := func(proc string) signals.Agent {
		return func(ctx context.Context, run *signals.Run) error {
			sigs := run.Signals
			for {
				for _, s := range sigs {
					ran.add(run.Thread, s.ID, proc)
					if hang(run.Thread, proc) && strings.HasSuffix(s.ID, "-hang") {
						<-ctx.Done() // until cancelled, or the lease is lost
						return ctx.Err()
					}
				}
				s, ok := run.Next(ctx)
				if !ok {
					return nil
				}
				sigs = []signals.Signal{s}
			}
		}
	}
	ropts := []signals.Option{signals.WithLeaseTTL(2 * time.Second), signals.WithRecoveryInterval(200 * time.Millisecond),
		signals.WithLinger(20 * time.Millisecond), signals.WithDedupeWindow(time.Second), signals.WithInboxExpiryFloor(0),
		signals.WithLogger(quiet)}
	newRT := func(b *redisstreams.Backend, proc string) *signals.Runtime {
		rt, err := signals.New(b, agentOf(proc), append([]signals.Option{signals.WithProcessID(proc)}, ropts...)...)
		if err != nil {
			t.Fatal(err)
		}
		return rt
	}
	ba, bb := newBackend(srv.URL()), newBackend(srv.URL())
	a, b := newRT(ba, "A"), newRT(bb, "B")
	closeRT := func(rt *signals.Runtime) {
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		_ = rt.Close(cctx)
	}
	t.Cleanup(func() { closeRT(a); closeRT(b) })
	proxy := redistest.NewProxy(t, srv.Addr())
	bk := newBackend("redis://" + proxy.Addr())
	k := newRT(bk, "K")
	t.Cleanup(func() {
		proxy.Restore()
		closeRT(k)
	})
	ctl, err := signals.NewController(ctx, newBackend(srv.URL()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ctl.Close() })

	// K's threads: a hanging run each, and a signal queued behind it.
	const killed = 50
	for i := range killed {
		th := fmt.Sprint("k", i)
		if _, err := k.Send(ctx, th, signals.Signal{ID: "k0-hang", Type: "t"}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range killed {
		ran.await(t, fmt.Sprint("k", i), "k0-hang", 20*time.Second)
	}
	for i := range killed {
		if _, err := k.Send(ctx, fmt.Sprint("k", i), signals.Signal{ID: "k1", Type: "t"}); err != nil {
			t.Fatal(err)
		}
	}
	proxy.BlackHole() // K is cut off for good, without Close
	killedAt := time.Now()

	// The churn, from A and B.
	start := time.Now()
	rts := []*signals.Runtime{a, b}
	var g errgroup.Group
	g.SetLimit(16)
	for i := range n {
		g.Go(func() error {
			th := fmt.Sprint("n", i)
			for j := range 3 {
				if _, err := rts[(i+j)%2].Send(ctx, th, signals.Signal{ID: fmt.Sprint("s", j), Type: "t"}); err != nil {
					return err
				}
			}
			return nil
		})
	}
	cancels := max(n/10, 1)
	var cancelRes, sendRes sync.Map
	for i := range cancels {
		g.Go(func() error {
			th := fmt.Sprint("c", i)
			rt := rts[i%2]
			if _, err := rt.Send(ctx, th, signals.Signal{ID: "c0-hang", Type: "t"}); err != nil {
				return err
			}
			for deadline := time.Now().Add(20 * time.Second); !ran.has(th, "c0-hang"); {
				if time.Now().After(deadline) {
					return fmt.Errorf("%s: c0-hang did not run", th)
				}
				time.Sleep(5 * time.Millisecond)
			}
			var sentAt time.Time
			for _, id := range []string{"c1", "c2"} {
				acc, err := rt.Send(ctx, th, signals.Signal{ID: id, Type: "t"})
				if err != nil {
					return err
				}
				sentAt = time.Now()
				sendRes.Store(th+"/"+id, fmt.Sprint(acc.Action, " ", acc.Owner))
			}
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			res, err := ctl.Cancel(cctx, th, "review h71", signals.DropQueued())
			if err != nil {
				return fmt.Errorf("%s: cancel: %w", th, err)
			}
			cancelRes.Store(th, fmt.Sprintf("%+v after %v", res, time.Since(sentAt).Round(time.Millisecond)))
			_, err = rts[(i+1)%2].Send(ctx, th, signals.Signal{ID: "c3", Type: "t"})
			return err
		})
	}
	for i := range killed {
		g.Go(func() error {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			_, err := ctl.Cancel(cctx, fmt.Sprint("d", i), "review h71", signals.DropQueued())
			return err
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		for j := range 3 {
			ran.await(t, fmt.Sprint("n", i), fmt.Sprint("s", j), time.Minute)
		}
	}
	for i := range cancels {
		ran.await(t, fmt.Sprint("c", i), "c3", time.Minute)
	}
	for i := range killed {
		ran.await(t, fmt.Sprint("k", i), "k1", time.Minute)
	}
	t.Logf("%d plain, %d cancelled and %d killed-owner threads ran in %v (the killed owner's taken over %v after the cut)",
		n, cancels, killed, time.Since(start).Round(time.Millisecond), time.Since(killedAt).Round(time.Millisecond))
	dropped := 0
	for i := range cancels {
		for _, id := range []string{"c1", "c2"} {
			if ran.has(fmt.Sprint("c", i), id) {
				dropped-- // ran: not dropped (a Cancel that reached the run late drops nothing)
			}
		}
		dropped += 2
	}
	t.Logf("%d of %d queued signals dropped by Cancel(DropQueued)", dropped, 2*cancels)
	if os.Getenv("LEASEBUS_H71_DEBUG") != "" {
		ran.mu.Lock()
		shown := 0
		for i := range cancels {
			th := fmt.Sprint("c", i)
			if len(ran.byID[th+"/c1"]) > 0 && shown < 10 {
				shown++
				cr, _ := cancelRes.Load(th)
				s1, _ := sendRes.Load(th + "/c1")
				t.Logf("%s: c0-hang ran on %v, c1 on %v (sent: %v), c2 on %v, c3 on %v; cancel: %v", th, ran.byID[th+"/c0-hang"], ran.byID[th+"/c1"], s1, ran.byID[th+"/c2"], ran.byID[th+"/c3"], cr)
			}
		}
		ran.mu.Unlock()
	}

	work := prefix + ":{" + signals.WorkTopic + "}"
	control := prefix + ":{" + signals.ControlTopic + "}"
	type keyState struct {
		key  string
		pttl time.Duration
	}
	scan := func() []keyState {
		var out []keyState
		iter := c.Scan(ctx, 0, prefix+":*", 1000).Iterator()
		for iter.Next(ctx) {
			ms, err := c.PTTL(ctx, iter.Val()).Result()
			if err != nil {
				t.Fatal(err)
			}
			if ms == -2*time.Nanosecond {
				continue
			}
			out = append(out, keyState{iter.Val(), ms})
		}
		if err := iter.Err(); err != nil {
			t.Fatal(err)
		}
		slices.SortFunc(out, func(a, b keyState) int { return strings.Compare(a.key, b.key) })
		return out
	}
	// The tables that follow live work; the others (done cache, seen
	// notices, tenure ends, watches) are caches that keep what they have
	// while idle (package doc, "What a thread leaves behind"): a notice
	// this process nacked and another acked stays in seen.
	live := []string{"sessions", "tidy", "givenUp", "adopting", "lapse", "ctlWaiting"}
	idle := time.Now()
	var keys []keyState
	for {
		keys = scan()
		var bad []string
		guards := 0
		for _, ks := range keys {
			switch {
			case ks.key == work || ks.key == control:
			case strings.Contains(ks.key, ":rguard:"):
				guards++
				if ks.pttl <= 0 || ks.pttl > 10*time.Minute {
					bad = append(bad, fmt.Sprintf("%s (PTTL %v)", ks.key, ks.pttl))
				}
			default:
				bad = append(bad, fmt.Sprintf("%s (PTTL %v)", ks.key, ks.pttl))
			}
		}
		var busy []string
		for name, rt := range map[string]*signals.Runtime{"A": a, "B": b} {
			fp := signals.Footprint(rt)
			for _, m := range live {
				if fp[m] != 0 {
					busy = append(busy, fmt.Sprintf("%s.%s=%d", name, m, fp[m]))
				}
			}
		}
		if len(bad) == 0 && len(busy) == 0 {
			t.Logf("%v after the last run: %d keys (%d read guards)", time.Since(idle).Round(time.Millisecond), len(keys), guards)
			break
		}
		if time.Since(idle) > time.Minute {
			t.Fatalf("a minute after the last run: %d unexpected keys, e.g. %q; live tables %q", len(bad), bad[:min(len(bad), 10)], busy)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The work group: no pending entry; consumers only of the runtimes.
	groups, err := c.XInfoGroups(ctx, work).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, gr := range groups {
		cs, err := c.XInfoConsumers(ctx, work, gr.Name).Result()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("work group %s: %d consumers, %d pending, lag %d: %+v", gr.Name, gr.Consumers, gr.Pending, gr.Lag, cs)
		if gr.Pending != 0 || gr.Consumers > 3 {
			t.Errorf("work group %s: %d consumers, %d pending; want at most the 3 runtimes' and none pending", gr.Name, gr.Consumers, gr.Pending)
		}
	}
	if groups, err := c.XInfoGroups(ctx, control).Result(); err != nil && err != redis.Nil {
		t.Fatal(err)
	} else if len(groups) != 0 {
		t.Errorf("control topic has groups: %+v", groups)
	}
	xlen := func(k string) int64 { n, _ := c.XLen(ctx, k).Result(); return n }
	t.Logf("work topic %d entries, control topic %d entries", xlen(work), xlen(control))
	t.Logf("in-process tables once idle: A %v, B %v; heap in use %d KiB (%d KiB before the runtimes), %d goroutines (%d before)",
		signals.Footprint(a), signals.Footprint(b), heapInuse()>>10, heap0>>10, runtime.NumGoroutine(), g0)
	if f := os.Getenv("LEASEBUS_H71_GOROUTINES"); f != "" {
		buf := make([]byte, 8<<20)
		_ = os.WriteFile(f, buf[:runtime.Stack(buf, true)], 0o644)
	}
	for name, rt := range map[string]*signals.Runtime{"A": a, "B": b} {
		fp := signals.Footprint(rt)
		if fp["doneCache"] > 1<<16 {
			t.Errorf("%s: done cache holds %d pairs, above its 65,536", name, fp["doneCache"])
		}
		// Below the sweep thresholds the caches hold at most one entry
		// per thread this runtime saw.
		if total := n + cancels + 2*killed; fp["ends"] > total || fp["watching"] > total || fp["seen"] > 4*total {
			t.Errorf("%s: caches %v above one entry per thread (%d threads)", name, fp, total)
		}
	}

	// A and B close: their read guards go, and so do their work-group
	// consumers unless they hold notices handed back as they closed
	// (those wait for the next runtime: K is cut off).
	guardsOf := func() int {
		n := 0
		for _, ks := range scan() {
			if strings.Contains(ks.key, ":rguard:") {
				n++
			}
		}
		return n
	}
	before := guardsOf()
	closeRT(a)
	closeRT(b)
	if after := guardsOf(); after != before-2 {
		t.Errorf("read guards: %d before A and B closed, %d after; want their two work-group guards gone", before, after)
	}
	cs, err := c.XInfoConsumers(ctx, work, signals.WorkGroup).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, ci := range cs {
		if ci.Pending == 0 {
			t.Errorf("work group consumer %s left holding nothing after A and B closed (K's never read: it was cut off holding none)", ci.Name)
		}
	}
	t.Logf("after A and B closed: %d read guards left (the cut-off K's, expiring within 10 minutes); work-group consumers: %+v", guardsOf(), cs)
}
