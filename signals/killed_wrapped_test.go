package signals_test

import (
	"context"
	"io"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/pubsub"
	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

// plainWrap wraps a PubSub and its lease.Provider and passes on no other
// capability but through Unwrap (pubsub.As finds DrainedDeleter,
// BacklogReader, EventChecker on what it wraps): a user's logging or
// metrics wrapper. Its Publish is the wrapped one's, without a group: no
// pubsub.GroupPublisher, so the signals runtime stores signals with
// Publish.
type plainWrap struct {
	pubsub.PubSub
	lease.Provider
}

func (w plainWrap) Unwrap() pubsub.PubSub { return w.PubSub }

// wrappedPrefix is the key prefix of TestKilledOwnerWrappedKeepsSignal.
const wrappedPrefix = "kw"

// TestKilledOwnerWrappedKeepsSignal: on a pubsub reached through a wrapper
// without pubsub.GroupPublisher (or BatchPublisher), a signal is stored with
// a plain Publish, which does not remove an inbox's expiry
// (pubsub.ExpireWhenDrained: only PublishFor does). Its owner killed while
// lingering on the drained inbox, a signal Sent to the thread (Forwarded:
// the dead owner's lease still held) and its sender gone too, the inbox
// expired with the signal unread inboxExpiry after the dead owner's ack,
// and the runtime started later never ran it: an accepted signal lost
// (review h62). Before ExpireWhenDrained, the inbox kept it until a runtime
// took the thread over. Now the runtime asks for the expiry only on a
// pubsub whose signal publishes remove it.
func TestKilledOwnerWrappedKeepsSignal(t *testing.T) {
	killedOwnerKeepsSignal(t, wrappedPrefix, "linger-wrapped", "TestWorkerLingerWrapped", true)
}

// killedOwnerKeepsSignal runs a worker process (workerTest, in mode) that
// owns thread t0 under prefix and lingers on its drained inbox, SIGKILLs it
// once its ack is written, and Sends signal "late" to t0 from a runtime
// behind plainWrap (Forwarded: the dead owner's lease is still held) that
// closes right after. 16s after the ack (past 3 first waits and 2 TTLs,
// 13s here) the inbox must still hold the signal, and a runtime started
// then (behind plainWrap with wrapLater) must run it.
func killedOwnerKeepsSignal(t *testing.T, prefix, mode, workerTest string, wrapLater bool) {
	t.Helper()
	srv, c := startRedis(t)
	ctx := context.Background()
	w := startWorker(t, srv.URL(), workerCfg{ID: "k", Mode: mode, Test: workerTest})
	w.expect(t, "ready", 30*time.Second)
	w.expect(t, "lingering", 30*time.Second)
	inbox := prefix + ":{" + signals.InboxTopic("t0") + "}"
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
		b, err := redisstreams.NewURL(ctx, srv.URL(), redisstreams.Options{Prefix: prefix})
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
	// still the dead worker's (its lease lapses procTTL after its last
	// renewal).
	sender := newRuntime(idle, true)
	acc, err := sender.Send(ctx, "t0", signals.Signal{ID: "late", Type: "msg"})
	if err != nil {
		t.Fatal(err)
	}
	if err := sender.Close(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("Send: %v, %v after the ack", acc.Action, time.Since(acked).Round(time.Millisecond))

	// Past 3 first waits and 2 TTLs after the dead owner's ack (13s here).
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
	}, wrapLater)
	select {
	case id := <-ran:
		if id != "late" {
			t.Fatalf("ran %q, want \"late\"", id)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the accepted signal \"late\" never ran")
	}
}

// TestWorkerLingerWrapped is the worker process of
// TestKilledOwnerWrappedKeepsSignal: through plainWrap it runs one signal
// on thread t0 with a 3s linger time, says "lingering" once it ran, and
// waits to be killed.
func TestWorkerLingerWrapped(t *testing.T) {
	lingerOneWorker(t, "linger-wrapped", wrappedPrefix, true)
}

// lingerOneWorker is the worker of killedOwnerKeepsSignal, when the
// environment selects mode: on a Backend under prefix (behind plainWrap
// with wrap) it runs one signal on thread t0 with a 3s linger time, says
// "lingering" once it ran, and waits to be killed.
func lingerOneWorker(t *testing.T, mode, prefix string, wrap bool) {
	if os.Getenv(workerEnv) != mode {
		t.Skip("only runs as a worker process of the killed-owner tests (mode " + mode + ")")
	}
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(3)
	}()
	ctx := context.Background()
	b, err := redisstreams.NewURL(ctx, os.Getenv("W_URL"), redisstreams.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	var ps pubsub.PubSub = b
	if wrap {
		ps = plainWrap{b, b}
	}
	ran := make(chan string, 1)
	agent := func(ctx context.Context, run *signals.Run) error {
		for _, s := range run.Signals {
			ran <- s.ID
		}
		return nil
	}
	rt, err := signals.New(ps, agent, signals.WithLeaseTTL(procTTL), signals.WithRecoveryInterval(200*time.Millisecond),
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
