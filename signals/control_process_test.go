package signals_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

// Multi-process tests of Runtime.Cancel and Runtime.Status. Their workers
// (TestControlWorkerProcess) use redisstreams.NewURL with go-redis's default
// pool. An owner worker sends its signals to its own thread, so it owns it;
// its agent logs each signal it starts in Redis ("ctl:log:<thread>"), and a
// signal named "block*" waits for its run's ctx to end and reports the
// cause. A canceller worker waits for the key "ctl:go", prints the thread's
// Status, calls Runtime.Cancel and prints the result.

func TestProcCancelFromThirdProcess(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	c := srv.Client(t)
	ctx := context.Background()
	const thread = "chat-1"
	owner := startCtlWorker(t, srv.URL(), "ctl-owner", "owner", thread, "block-1,s2,s3", "")
	owner.expect(t, "ready", 30*time.Second)
	owner.expect(t, "started block-1", 30*time.Second)
	canceller := startCtlWorker(t, srv.URL(), "ctl-cancel", "canceller", thread, "", "")
	canceller.expect(t, "ready", 30*time.Second)
	c.Set(ctx, "ctl:go", "1", 0)

	st := canceller.expect(t, "status ", 30*time.Second)
	if !strings.Contains(st, "process=owner ") || !strings.Contains(st, " queued=2 ") || !strings.Contains(st, " inflight=1 ") {
		t.Fatalf("status from the third process = %q, want owner holding the thread, 2 queued, 1 in flight", st)
	}
	res := canceller.expect(t, "cancel ", 30*time.Second)
	if !strings.HasPrefix(res, "cancel cancelled=true process=owner ") {
		t.Fatalf("canceller: %q, want a cancel of owner's run", res)
	}
	cause := owner.expect(t, "cause block-1 ", 10*time.Second)
	if !strings.Contains(cause, "is-cancelled=true") || !strings.Contains(cause, "user pressed stop") {
		t.Fatalf("owner's agent saw %q, want a cause matching ErrCancelled with the reason", cause)
	}
	owner.expect(t, "started s2", 10*time.Second)
	owner.expect(t, "started s3", 10*time.Second)
	// Let the tenure end (its lease goes away), then check the log: each
	// signal started once, in order.
	waitFree(t, c, thread)
	if got := c.LRange(ctx, "ctl:log:"+thread, 0, -1).Val(); strings.Join(got, ",") != "block-1,s2,s3" {
		t.Fatalf("signals started %v, want block-1,s2,s3 each once, in order", got)
	}
	// The tenure ended with the inbox drained, so it deleted it (an idle
	// thread leaves no stream).
	deadline := time.Now().Add(10 * time.Second)
	for c.Exists(ctx, "leasebus:{signals.thread."+thread+"}").Val() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("inbox still there 10s after the tenure ended drained: %d entries", c.XLen(ctx, "leasebus:{signals.thread."+thread+"}").Val())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestProcCancelDuringHandOff(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	c := srv.Client(t)
	ctx := context.Background()
	const thread = "chat-2"
	owner := startCtlWorker(t, srv.URL(), "ctl-owner", "owner", thread, "s1,block-2", "hook")
	owner.expect(t, "ready", 30*time.Second)
	owner.expect(t, "started s1", 30*time.Second)
	owner.expect(t, "handoff "+thread, 10*time.Second) // s1's run ended; block-2 is being handed the lease
	canceller := startCtlWorker(t, srv.URL(), "ctl-cancel", "canceller", thread, "", "")
	canceller.expect(t, "ready", 30*time.Second)
	c.Set(ctx, "ctl:go", "1", 0)
	owner.expect(t, "cancel-received "+thread+" run=", 10*time.Second) // pending: no run holds the thread yet
	c.Set(ctx, "go:"+thread, "1", 0)                                   // let the hand-off go on
	started := owner.expect(t, "started block-2 ", 10*time.Second)
	cause := owner.expect(t, "cause block-2 ", 10*time.Second)
	if !strings.Contains(cause, "is-cancelled=true") || !strings.Contains(cause, "user pressed stop") {
		t.Fatalf("owner's agent saw %q, want the cancel's cause", cause)
	}
	res := canceller.expect(t, "cancel ", 10*time.Second)
	runID := strings.Fields(started)[2]
	if !strings.HasPrefix(res, "cancel cancelled=true process=owner run="+runID+" ") {
		t.Fatalf("canceller: %q, want the cancel of the run that took the thread, %s", res, runID)
	}
	waitFree(t, c, thread)
	if got := c.LRange(ctx, "ctl:log:"+thread, 0, -1).Val(); strings.Join(got, ",") != "s1,block-2" {
		t.Fatalf("signals started %v, want s1,block-2 each once", got)
	}
}

// TestProcCancelUnreachableOwner: the owner is SIGSTOPped; a Cancel from
// another process fails with ErrUnreachable instead of reporting success.
func TestProcCancelUnreachableOwner(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	c := srv.Client(t)
	ctx := context.Background()
	const thread = "chat-3"
	owner := startCtlWorker(t, srv.URL(), "ctl-owner", "owner", thread, "block-1", "")
	owner.expect(t, "started block-1", 30*time.Second)
	canceller := startCtlWorker(t, srv.URL(), "ctl-cancel", "canceller", thread, "", "")
	canceller.expect(t, "ready", 30*time.Second)
	owner.signal(t, 19) // SIGSTOP
	c.Set(ctx, "ctl:go", "1", 0)
	res := canceller.expect(t, "cancel ", 30*time.Second)
	if !strings.Contains(res, "unreachable=true") {
		t.Fatalf("canceller: %q, want an error wrapping ErrUnreachable", res)
	}
}

// startCtlWorker starts a control-test worker. sigs (comma separated) are
// sent by the owner to thread; hook "hook" (passed as workerCfg.GoKey, which
// TestControlWorkerProcess reads as a flag) makes the owner stop at each
// hand-off until the key "go:<thread>" exists.
func startCtlWorker(t *testing.T, url, mode, id, thread, sigs, hook string) *worker {
	t.Helper()
	return startWorker(t, url, workerCfg{ID: id, Mode: mode, Thread: thread, Sigs: strings.Split(sigs, ","), GoKey: hook,
		Test: "TestControlWorkerProcess"})
}

// waitFree waits until thread's lease is gone (its tenure ended).
func waitFree(t *testing.T, c *redis.Client, thread string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for c.Exists(context.Background(), "leasebus:lease:{signals.thread."+thread+"}").Val() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("thread %s still leased 20s after its signals ran", thread)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestControlWorkerProcess is the body of a control-test worker; it is
// skipped unless the test binary was started as one.
func TestControlWorkerProcess(t *testing.T) {
	mode := os.Getenv(workerEnv)
	if !strings.HasPrefix(mode, "ctl-") {
		t.Skip("only runs as a worker process of the control tests")
	}
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(3)
	}()
	ctx := context.Background()
	id, thread := os.Getenv("W_ID"), os.Getenv("W_THREAD")
	b, err := redisstreams.NewURL(ctx, os.Getenv("W_URL"), redisstreams.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := b.Client()
	agent := func(ctx context.Context, run *signals.Run) error {
		for _, s := range run.Signals {
			c.RPush(context.Background(), "ctl:log:"+run.Thread, s.ID)
			fmt.Printf("W started %s %s\n", s.ID, run.ID)
			if strings.HasPrefix(s.ID, "block") {
				<-ctx.Done()
				cause := context.Cause(ctx)
				fmt.Printf("W cause %s is-cancelled=%t %v\n", s.ID, errors.Is(cause, signals.ErrCancelled), cause)
			}
		}
		return nil
	}
	opts := []signals.Option{signals.WithProcessID(id), signals.WithLeaseTTL(procTTL),
		signals.WithRecoveryInterval(200 * time.Millisecond), signals.WithLinger(100 * time.Millisecond),
		signals.WithObserver(func(e signals.Event) {
			if e.Kind == signals.Cancelled {
				fmt.Printf("W cancel-received %s run=%s\n", e.Thread, e.RunID)
			}
		})}
	if os.Getenv("W_GO") == "hook" {
		opts = append(opts, signals.WithHooks(signals.Hooks{BeforeHandOff: func(th string) {
			fmt.Printf("W handoff %s\n", th)
			for c.Exists(context.Background(), "go:"+th).Val() == 0 {
				time.Sleep(time.Millisecond)
			}
		}}))
	}
	rt, err := signals.New(b, agent, opts...)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("W ready")
	switch mode {
	case "ctl-owner":
		for _, s := range strings.Split(os.Getenv("W_SIGS"), ",") {
			if _, err := rt.Send(ctx, thread, signals.Signal{ID: s, Type: "msg"}); err != nil {
				t.Fatal(err)
			}
		}
	case "ctl-cancel":
		for c.Exists(ctx, "ctl:go").Val() == 0 {
			time.Sleep(time.Millisecond)
		}
		st, err := rt.Status(ctx, thread)
		fmt.Printf("W status process=%s run=%s token=%d queued=%d inflight=%d last=%t err=%v\n",
			st.Process, st.RunID, st.Token, st.Queued, st.InFlight, !st.LastSignal.IsZero(), err)
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		res, err := rt.Cancel(cctx, thread, "user pressed stop")
		cancel()
		fmt.Printf("W cancel cancelled=%t process=%s run=%s unreachable=%t err=%v\n",
			res.Cancelled, res.Process, res.RunID, errors.Is(err, signals.ErrUnreachable), err)
	}
	select {} // serve until killed
}
