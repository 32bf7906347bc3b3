package signals_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
)

// TestReviewH69BlackHoledOwnerBehindBigBacklog (review h69) is
// TestProcTakeoverBehindBigBacklog with the owner black-holed instead of
// SIGKILLed: process A (its runtime on a NewURL client with default
// options, through a redistest.Proxy) runs x0 on thread x with x1 queued
// behind it, while 5,000 signals wait behind 60s runs on 100 threads of
// process B and C serves; then A's path to Redis is black-holed and A's
// process keeps running. It asserts:
//
//  1. A's run ctx is cancelled before another process's run of x starts:
//     A's fenced write at its cancel is accepted and its cancel time is
//     before the start of the next run of x (doc.go, guarantee 6: "the
//     owner's network black-holed mid-run: its run ctx is cancelled before
//     another process's run starts");
//  2. x is taken over by B or C within TTL + recovery + 1s of the hole
//     (doc.go "Takeover": "a dead owner's thread runs again elsewhere
//     within about TTL + recovery interval while signals wait behind long
//     runs elsewhere (within TTL + recovery + 1s ...
//     TestProcTakeoverBehindBigBacklog with 5,000 behind 60s runs on 100
//     threads)"); a black-holed owner is cut off the same way;
//  3. the takeover's first signal is x0, marked Redelivered (x1 waits
//     behind its 60s run).
func TestReviewH69BlackHoledOwnerBehindBigBacklog(t *testing.T) {
	if testing.Short() {
		t.Skip("a multi-process load test: skipped under -short")
	}
	threads, per := bigBacklogInt("BIG_BACKLOG_THREADS", 100), bigBacklogInt("BIG_BACKLOG_PER", 50)
	t.Setenv("BIG_BACKLOG_THREADS", fmt.Sprint(threads))
	t.Setenv("BIG_BACKLOG_PER", fmt.Sprint(per))
	srv, c := startRedis(t)
	proxy := redistest.NewProxy(t, srv.Addr())
	const recovery = 200 * time.Millisecond
	busy := startWorker(t, srv.URL(), workerCfg{ID: "B", Mode: "serve", Test: "TestBigBacklogWorker", Delay: 60 * time.Second})
	peer := startWorker(t, srv.URL(), workerCfg{ID: "C", Mode: "serve", Delay: 60 * time.Second})
	busy.expect(t, "ready", 30*time.Second)
	peer.expect(t, "ready", 30*time.Second)
	busy.expect(t, "backlog-sent", 120*time.Second)
	for th := range threads {
		waitLog(t, c, fmt.Sprint("busy", th), 1, 30*time.Second)
	}
	t.Logf("%d threads busy, %d signals queued behind their runs", threads, threads*per)
	time.Sleep(2 * time.Second) // let the notice cycle settle
	a := startWorker(t, srv.URL(), workerCfg{ID: "A", Mode: "send", Thread: "x", Sigs: []string{"x0", "x1"}, Delay: time.Minute, Via: proxy.Addr()})
	a.expect(t, "ran x x0", 30*time.Second)
	a.expect(t, "sent x1", 10*time.Second)
	proxy.BlackHole()
	holed := time.Now()
	t.Cleanup(proxy.Restore)

	bound := procTTL + recovery + time.Second
	var aTok uint64
	var aAt int64
	var aFence bool
	if _, err := fmt.Sscanf(a.expect(t, "cancelled x x0", 2*procTTL), "cancelled x x0 %d %d fence=%t", &aTok, &aAt, &aFence); err != nil {
		t.Fatal(err)
	}
	var took time.Duration
	var by logEntry
	for {
		for _, e := range readLog(t, c, "x") {
			if e.FenceOK && e.Proc != "A" {
				by = e
				break
			}
		}
		took = time.Since(holed)
		if by.Proc != "" || took > 10*bound {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if by.Proc == "" {
		t.Fatalf("x not taken over %v after A was black-holed (bound %v)", took.Round(time.Millisecond), bound)
	}
	t.Logf("A's run cancelled %v after the hole (fence ok %v); x taken over by %s (token %d, %s, redelivered %v) about %v after it",
		time.Duration(aAt-holed.UnixNano()).Round(time.Millisecond), aFence, by.Proc, by.Token, by.ID, by.Redelivered, took.Round(time.Millisecond))
	line := ""
	if by.Proc == peer.name { // (B's agent, TestBigBacklogWorker's, prints no start: its fence tells)
		line = peer.expect(t, "started x "+by.ID, 5*time.Second)
	}
	var bTok uint64
	var bAt int64
	if line != "" {
		if _, err := fmt.Sscanf(line, "started x "+by.ID+" %d %d", &bTok, &bAt); err != nil {
			t.Fatal(err)
		}
		if aAt >= bAt {
			t.Errorf("A's run ctx was cancelled %v after %s's run of x started", time.Duration(aAt-bAt), by.Proc)
		}
	}
	if !aFence {
		t.Errorf("A's fenced write at its cancel was refused: a newer run of x had started before A's ctx was cancelled")
	}
	if by.Token <= aTok {
		t.Errorf("%s's token %d not above A's %d", by.Proc, by.Token, aTok)
	}
	if by.ID != "x0" || !by.Redelivered {
		t.Errorf("the takeover's first signal is %s (Redelivered %v), want x0 marked Redelivered", by.ID, by.Redelivered)
	}
	if took > bound {
		t.Errorf("x taken over %v after A was black-holed, want within %v (TTL %v + recovery %v + 1s); %d signals queued on %d busy threads",
			took.Round(time.Millisecond), bound, procTTL, recovery, threads*per, threads)
	}
	t.Logf("x's log: %+v", readLog(t, c, "x"))
	if v, _ := c.Get(context.Background(), "violations").Int(); v != 0 {
		t.Errorf("%d fenced writes refused while their run's ctx was live", v)
	}
}
