package signals_test

import (
	"context"
	"io"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/leasebus/leasebus/pubsub"
	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

// mixedPrefix is the key prefix of TestKilledOwnerMixedSenderKeepsSignal.
const mixedPrefix = "km"

// TestKilledOwnerMixedSenderKeepsSignal: the inbox's expiry
// (pubsub.ExpireWhenDrained) is asked for by the owner's runtime when its
// own pubsub publishes signals with their group (groupPublishes), but the
// signals of a thread are sent by any process. Here the owner is on a
// plain redisstreams Backend and the sender goes through a wrapper without
// pubsub.GroupPublisher or BatchPublisher (plainWrap): its plain Publish
// leaves the expiry the dead owner's ack set. With an expiry of 3 first
// waits and 2 TTLs (13s here) the inbox expired with the accepted signal
// unread (review h63: failed 2 of 2). The expiry is now at least 10
// minutes (minInboxExpiry), so the signal survives this 16s outage and a
// runtime that comes back runs it; one that comes back only after the
// floor finds it gone (signals doc, "What a thread leaves behind").
func TestKilledOwnerMixedSenderKeepsSignal(t *testing.T) {
	srv, c := startRedis(t)
	ctx := context.Background()
	w := startWorker(t, srv.URL(), workerCfg{ID: "k", Mode: "linger-mixed", Test: "TestWorkerLingerMixed"})
	w.expect(t, "ready", 30*time.Second)
	w.expect(t, "lingering", 30*time.Second)
	inbox := mixedPrefix + ":{" + signals.InboxTopic("t0") + "}"
	for deadline := time.Now().Add(10 * time.Second); ; {
		p, err := c.XPending(ctx, inbox, signals.InboxGroup).Result()
		if err != nil {
			t.Fatal(err)
		}
		if p.Count == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("inbox %s: %d pending 10s after its run", inbox, p.Count)
		}
		time.Sleep(10 * time.Millisecond)
	}
	acked := time.Now()
	w.signal(t, syscall.SIGKILL)

	newRuntime := func(agent signals.Agent, wrap bool) *signals.Runtime {
		t.Helper()
		b, err := redisstreams.NewURL(ctx, srv.URL(), redisstreams.Options{Prefix: mixedPrefix})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		var ps pubsub.PubSub = b
		if wrap {
			ps = plainWrap{b, b}
		}
		rt, err := signals.New(ps, agent, signals.WithLeaseTTL(procTTL),
			signals.WithRecoveryInterval(200*time.Millisecond), signals.WithLinger(3*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = rt.Close(context.Background()) })
		return rt
	}
	idle := func(ctx context.Context, run *signals.Run) error { return nil }
	// A wrapped sender that goes away right after its Send: the thread is
	// still the dead worker's.
	sender := newRuntime(idle, true)
	acc, err := sender.Send(ctx, "t0", signals.Signal{ID: "late", Type: "msg"})
	if err != nil {
		t.Fatal(err)
	}
	if err := sender.Close(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("Send: %v, %v after the ack", acc.Action, time.Since(acked).Round(time.Millisecond))

	// Past 3 first waits and 2 TTLs after the dead owner's ack (13s
	// here), within the floor.
	time.Sleep(time.Until(acked.Add(16 * time.Second)))
	n, err := c.XLen(ctx, inbox).Result()
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Errorf("inbox %s gone (or empty) 16s after the dead owner's ack: the accepted signal was deleted unread", inbox)
	}
	ran := make(chan string, 4)
	newRuntime(func(ctx context.Context, run *signals.Run) error {
		for _, s := range run.Signals {
			ran <- s.ID
		}
		return nil
	}, false)
	select {
	case id := <-ran:
		if id != "late" {
			t.Fatalf("ran %q, want \"late\"", id)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the accepted signal \"late\" never ran")
	}
}

// TestWorkerLingerMixed is the worker process of
// TestKilledOwnerMixedSenderKeepsSignal: on a plain Backend it runs one
// signal on thread t0 with a 3s linger time, says "lingering" once it ran,
// and waits to be killed.
func TestWorkerLingerMixed(t *testing.T) {
	if os.Getenv(workerEnv) != "linger-mixed" {
		t.Skip("only runs as a worker process of TestKilledOwnerMixedSenderKeepsSignal")
	}
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(3)
	}()
	ctx := context.Background()
	b, err := redisstreams.NewURL(ctx, os.Getenv("W_URL"), redisstreams.Options{Prefix: mixedPrefix})
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan string, 1)
	agent := func(ctx context.Context, run *signals.Run) error {
		for _, s := range run.Signals {
			ran <- s.ID
		}
		return nil
	}
	rt, err := signals.New(b, agent, signals.WithLeaseTTL(procTTL), signals.WithRecoveryInterval(200*time.Millisecond),
		signals.WithLinger(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	os.Stdout.WriteString("W ready\n")
	if _, err := rt.Send(ctx, "t0", signals.Signal{ID: "s0", Type: "msg"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ran:
	case <-time.After(30 * time.Second):
		t.Fatal("run not done within 30s")
	}
	os.Stdout.WriteString("W lingering\n")
	select {} // until killed
}
