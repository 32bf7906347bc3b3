package signals_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

// Takeover of a dead owner's thread behind a larger backlog of queued
// signals on busy threads elsewhere than TestProcTakeoverBehindBacklog (20
// threads x 25 queued). The doc (signals/doc.go, "Takeover") promises "a
// dead owner's thread runs again elsewhere within about TTL + recovery
// interval, however many signals wait behind long runs elsewhere". Found by
// review 6 of 2026-11-22: with 5,000 signals queued behind 60s runs on 100
// threads, the takeover took 8.3s (4 of 4 runs), because each first
// delivery of a busy thread's notice held a handler slot for 250ms and the
// dead owner's notice, newer, waited behind the burst for a free slot.

func bigBacklogInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

// TestBigBacklogWorker is a worker process: BIG_BACKLOG_THREADS busy threads with
// one 30s run each and BIG_BACKLOG_PER queued signals behind it.
func TestBigBacklogWorker(t *testing.T) {
	if os.Getenv(workerEnv) == "" {
		t.Skip("worker only")
	}
	ctx := context.Background()
	rt, _ := fencedWorker(t, procTTL)
	fmt.Println("W ready")
	threads, per := bigBacklogInt("BIG_BACKLOG_THREADS", 100), bigBacklogInt("BIG_BACKLOG_PER", 50)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for th := range threads {
		thread := fmt.Sprint("busy", th)
		for i := range per + 1 {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				if _, err := rt.Send(ctx, thread, signals.Signal{ID: fmt.Sprintf("%s-%03d", thread, i), Type: "msg"}); err != nil {
					fmt.Println("W send error", err)
				}
			})
			if i == 0 {
				wg.Wait() // the first one wakes the thread here
			}
		}
	}
	wg.Wait()
	fmt.Println("W backlog-sent")
	select {}
}

func TestProcTakeoverBehindBigBacklog(t *testing.T) {
	threads, per := bigBacklogInt("BIG_BACKLOG_THREADS", 100), bigBacklogInt("BIG_BACKLOG_PER", 50)
	t.Setenv("BIG_BACKLOG_THREADS", fmt.Sprint(threads))
	t.Setenv("BIG_BACKLOG_PER", fmt.Sprint(per))
	srv, c := startRedis(t)
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
	time.Sleep(time.Duration(bigBacklogInt("BIG_BACKLOG_SETTLE_MS", 2000)) * time.Millisecond) // let the notice cycle settle
	a := startWorker(t, srv.URL(), workerCfg{ID: "A", Mode: "send", Thread: "x", Sigs: []string{"x0"}, Delay: time.Minute})
	a.expect(t, "ran x x0", 30*time.Second)
	a.signal(t, syscall.SIGKILL)
	a.wait(t, 10*time.Second)
	killed := time.Now()
	bound := procTTL + recovery + time.Second
	var took time.Duration
	noticeID := ""
	lastDbg := time.Now()
	for {
		if time.Since(lastDbg) > 500*time.Millisecond {
			lastDbg = time.Now()
			bg := context.Background()
			if noticeID == "" {
				msgs, _ := c.XRange(bg, "leasebus:{signals.work}", "-", "+").Result()
				for _, m := range msgs {
					if fmt.Sprint(m.Values) != "" && containsAll(fmt.Sprint(m.Values), "x0") {
						noticeID = m.ID
					}
				}
			}
			sum, _ := c.XPending(bg, "leasebus:{signals.work}", "signals.runtimes").Result()
			var pe []redis.XPendingExt
			if noticeID != "" {
				pe, _ = c.XPendingExt(bg, &redis.XPendingExtArgs{Stream: "leasebus:{signals.work}", Group: "signals.runtimes", Start: noticeID, End: noticeID, Count: 1}).Result()
			}
			old, _ := c.XPendingExt(bg, &redis.XPendingExtArgs{Stream: "leasebus:{signals.work}", Group: "signals.runtimes", Idle: time.Second, Start: "-", End: "+", Count: 100000}).Result()
			t.Logf("%v after kill: pending %d %v; idle>=1s: %d; x0 notice %s: %+v", time.Since(killed).Round(time.Millisecond), sum.Count, sum.Consumers, len(old), noticeID, pe)
		}
		var by string
		for _, e := range readLog(t, c, "x") {
			if e.FenceOK && e.Proc != "A" {
				by = e.Proc
			}
		}
		took = time.Since(killed)
		if by != "" {
			t.Logf("x taken over by %s %v after A was killed", by, took.Round(time.Millisecond))
			break
		}
		if took > 20*bound {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if took > bound {
		t.Fatalf("x taken over %v after A was killed (or not at all), want within %v (TTL %v + recovery %v + 1s); %d signals queued on %d busy threads",
			took.Round(time.Millisecond), bound, procTTL, recovery, threads*per, threads)
	}
}

func containsAll(s, sub string) bool { return strings.Contains(s, sub) }

// fencedWorker starts the runtime of a worker process as a user would
// (NewURL, default options) with lease TTL ttl, the recovery interval of
// W_RECOVERY (200ms when unset) and a 100ms linger, whose agent logs each
// signal with its fencing token (fence) and takes W_DELAY over it or until
// its ctx ends. The process exits when the test closes its stdin.
func fencedWorker(t *testing.T, ttl time.Duration) (*signals.Runtime, redis.UniversalClient) {
	t.Helper()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(3)
	}()
	name := os.Getenv("W_ID")
	b, err := redisstreams.NewURL(context.Background(), os.Getenv("W_URL"), redisstreams.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := b.Client()
	delay, _ := time.ParseDuration(os.Getenv("W_DELAY"))
	recovery, _ := time.ParseDuration(os.Getenv("W_RECOVERY"))
	if recovery <= 0 {
		recovery = 200 * time.Millisecond
	}
	agent := func(ctx context.Context, run *signals.Run) error {
		return eachSignal(ctx, run, func(s signals.Signal) {
			_, _ = fence(context.Background(), c, run.Thread, run.Token, fmt.Sprintf("%s|%s|%d|%t", s.ID, name, run.Token, s.Redelivered))
			select {
			case <-time.After(delay):
			case <-ctx.Done():
			}
		})
	}
	rt, err := signals.New(b, agent, signals.WithProcessID(name), signals.WithLeaseTTL(ttl),
		signals.WithRecoveryInterval(recovery), signals.WithLinger(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("W ready")
	return rt, c
}
