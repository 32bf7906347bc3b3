package signals_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

// killedThreads is how many threads the worker of
// TestKilledOwnerLeavesNoInbox leaves lingering when it is killed.
const killedThreads = 10

// killedPrefix is the key prefix of TestKilledOwnerLeavesNoInbox.
const killedPrefix = "kl"

// TestKilledOwnerLeavesNoInbox: a process SIGKILLed while its tenures
// linger on drained inboxes leaves no inbox behind for ever. Before the
// inbox subscriptions set pubsub.ExpireWhenDrained, nothing ever looked at
// those threads again (no notice of theirs is pending): 9-10 of 10 inboxes
// were still there 30s after the kill (review h59). Now each inbox goes
// inboxExpiry after the ack that drained it (3 first waits and 2 TTLs,
// 13s here, with the 10-minute floor lowered for the test), and once the idle windows (1s each) passed only the shared
// topics are left, as TestThreadFootprint finds after clean ends, and the
// dead subscriptions' read guards, which expire 10 minutes after their last
// read.
func TestKilledOwnerLeavesNoInbox(t *testing.T) {
	srv, c := startRedis(t)
	ctx := context.Background()
	w := startWorker(t, srv.URL(), workerCfg{ID: "k", Mode: "linger", Test: "TestWorkerLinger"})
	w.expect(t, "ready", 30*time.Second)
	w.expect(t, "lingering", 30*time.Second)
	// The premise: each inbox is there and drained (its ack written), its
	// tenure lingering in the worker, which would delete it 3s after.
	inboxes := make([]string, killedThreads)
	for i := range inboxes {
		inboxes[i] = killedPrefix + ":{" + signals.InboxTopic(fmt.Sprint("t", i)) + "}"
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, k := range inboxes {
		for {
			n, err := c.Exists(ctx, k).Result()
			if err != nil {
				t.Fatal(err)
			}
			if n != 1 {
				t.Fatalf("inbox %s missing before the kill: the worker's tenure ended already", k)
			}
			p, err := c.XPending(ctx, k, signals.InboxGroup).Result()
			if err != nil {
				t.Fatal(err)
			}
			if p.Count == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("inbox %s: %d pending 10s after its run", k, p.Count)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	w.signal(t, syscall.SIGKILL)
	killed := time.Now()
	// inboxExpiry is 13s here; the bound leaves room for a loaded machine.
	const bound = 45 * time.Second
	for {
		keys, err := c.Keys(ctx, killedPrefix+":*").Result()
		if err != nil {
			t.Fatal(err)
		}
		var left []string
		for _, k := range keys {
			switch {
			case slices.Contains(inboxes, k):
				left = append(left, k)
			case k == killedPrefix+":{"+signals.WorkTopic+"}" || k == killedPrefix+":{"+signals.ControlTopic+"}":
			case strings.Contains(k, "}:rguard:"):
				// A dead member's read guard, of its inbox or work-group
				// subscription: it expires 10 minutes after the member's
				// last read (redisstreams doc).
				if ttl := c.PTTL(ctx, k).Val(); ttl <= 0 || ttl > 10*time.Minute {
					t.Fatalf("read guard %s left with PTTL %v, want at most 10m", k, ttl)
				}
			default:
				left = append(left, k) // the idle windows are 1s: nothing else outlives them
			}
		}
		if len(left) == 0 {
			t.Logf("only the shared topics left %v after the kill", time.Since(killed).Round(100*time.Millisecond))
			return
		}
		if time.Since(killed) > bound {
			t.Fatalf("%d keys still there %v after the kill: %v", len(left), bound, left)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestWorkerLinger is the worker process of TestKilledOwnerLeavesNoInbox:
// it runs one signal on each of killedThreads threads, with a 3s linger
// time, says "lingering" once every run returned, and waits to be killed.
func TestWorkerLinger(t *testing.T) {
	if os.Getenv(workerEnv) != "linger" {
		t.Skip("only runs as a worker process of TestKilledOwnerLeavesNoInbox")
	}
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(3)
	}()
	ctx := context.Background()
	// NewURL with default client options, as users build it; the idle
	// windows short, so that only the inboxes could outlive the wait.
	b, err := redisstreams.NewURL(ctx, os.Getenv("W_URL"), redisstreams.Options{Prefix: killedPrefix, FenceIdle: time.Second, LeaseStatusWindow: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan string, killedThreads)
	agent := func(ctx context.Context, run *signals.Run) error {
		for _, s := range run.Signals {
			ran <- s.ID
		}
		return nil
	}
	rt, err := signals.New(b, agent, signals.WithLeaseTTL(procTTL), signals.WithRecoveryInterval(200*time.Millisecond),
		signals.WithLinger(3*time.Second), signals.WithDedupeWindow(time.Second), signals.WithInboxExpiryFloor(0))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("W ready")
	for i := range killedThreads {
		if _, err := rt.Send(ctx, fmt.Sprint("t", i), signals.Signal{ID: fmt.Sprint("s", i), Type: "msg"}); err != nil {
			t.Fatal(err)
		}
	}
	for range killedThreads {
		select {
		case <-ran:
		case <-time.After(30 * time.Second):
			t.Fatal("runs not done within 30s")
		}
	}
	fmt.Println("W lingering")
	select {} // until killed
}
