package signals_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

// h65LoadPrefix is the key prefix of TestReviewH65KilledUnderLoadLeavesInboxes.
const h65LoadPrefix = "h65kl"

// h65LoadThreads is how many threads the worker sends to.
const h65LoadThreads = 200

// TestReviewH65KilledUnderLoadLeavesInboxes (review h65): the user-level
// form of TestReviewH65CutAfterRecordLeavesInbox and
// TestReviewH65OwnNoticeAckBeforeInboxAck. A process sending to and running
// 200 threads (runs that return at once, go-redis default clients) is
// SIGKILLed; a live peer takes over what it left. Every inbox must go: a
// drained one by its expiry, one with work by the peer's tenure. An inbox
// whose entry the killed process had recorded done and not yet acked, and
// whose notice was acked (by the peer finding it done, or by the killed
// process itself, first), stayed for ever.
func TestReviewH65KilledUnderLoadLeavesInboxes(t *testing.T) {
	srv, c := startRedis(t)
	ctx := context.Background()
	agent := func(ctx context.Context, r *signals.Run) error { return nil }
	urlRuntime(t, srv.URL(), h65LoadPrefix, "B", agent, nil, signals.WithLeaseTTL(procTTL),
		signals.WithRecoveryInterval(200*time.Millisecond), signals.WithLinger(20*time.Millisecond),
		signals.WithInboxExpiryFloor(0))
	w := startWorker(t, srv.URL(), workerCfg{ID: "kl", Mode: "h65load", Test: "TestWorkerH65Load"})
	w.expect(t, "ready", 30*time.Second)
	w.expect(t, "busy", 60*time.Second)
	w.signal(t, syscall.SIGKILL)
	killed := time.Now()
	// inboxExpiry 5.8s, TTL 2s, the peer's lapse try a TTL after a notice:
	// a generous bound for a loaded machine.
	const bound = 45 * time.Second
	for {
		keys, err := c.Keys(ctx, h65LoadPrefix+":{"+signals.InboxTopic("")+"*").Result()
		if err != nil {
			t.Fatal(err)
		}
		var left []string
		for _, k := range keys {
			if !strings.Contains(k, "}:") { // the streams, not their read guards
				left = append(left, k)
			}
		}
		if len(left) == 0 {
			t.Logf("every inbox gone %v after the kill", time.Since(killed).Round(100*time.Millisecond))
			return
		}
		if time.Since(killed) > bound {
			var desc []string
			for _, k := range left[:min(len(left), 5)] {
				p, _ := c.XPending(ctx, k, signals.InboxGroup).Result()
				var n int64
				if p != nil {
					n = p.Count
				}
				desc = append(desc, fmt.Sprintf("%s (pending %d, PTTL %v)", k, n, c.PTTL(ctx, k).Val()))
			}
			wp, _ := c.XPending(ctx, h65LoadPrefix+":{"+signals.WorkTopic+"}", signals.WorkGroup).Result()
			var np int64
			if wp != nil {
				np = wp.Count
			}
			t.Fatalf("%d inboxes still there %v after the kill (%d wake notices pending), e.g. %v",
				len(left), bound, np, desc)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestWorkerH65Load is the worker of TestReviewH65KilledUnderLoadLeavesInboxes:
// 8 senders send to h65LoadThreads threads without pause; it says "busy"
// after 2,000 signals ran and goes on until killed.
func TestWorkerH65Load(t *testing.T) {
	if os.Getenv(workerEnv) != "h65load" {
		t.Skip("only runs as a worker process of TestReviewH65KilledUnderLoadLeavesInboxes")
	}
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(3)
	}()
	ctx := context.Background()
	b, err := redisstreams.NewURL(ctx, os.Getenv("W_URL"), redisstreams.Options{Prefix: h65LoadPrefix})
	if err != nil {
		t.Fatal(err)
	}
	var ran atomic.Int64
	busy := make(chan struct{})
	agent := func(ctx context.Context, r *signals.Run) error {
		if ran.Add(int64(len(r.Signals))) == 2000 {
			close(busy)
		}
		return nil
	}
	rt, err := signals.New(b, agent, signals.WithLeaseTTL(procTTL), signals.WithRecoveryInterval(200*time.Millisecond),
		signals.WithLinger(20*time.Millisecond), signals.WithInboxExpiryFloor(0))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("W ready")
	var seq atomic.Int64
	for g := range 8 {
		go func() {
			for i := g; ; i += 8 {
				n := seq.Add(1)
				_, _ = rt.Send(ctx, fmt.Sprint("t", i%h65LoadThreads), signals.Signal{ID: fmt.Sprint("s", n), Type: "msg"})
			}
		}()
	}
	<-busy
	fmt.Println("W busy")
	select {} // until killed
}
