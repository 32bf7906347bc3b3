package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

// TestReviewH67DropQueuedWithNoHolder: "threads cancel THREAD --drop-queued"
// says it "also drop[s] the signals queued for the thread (they are not
// run)". The drop is applied by the owner the cancel reaches
// (signals.DropQueued); on a thread no process holds (its owner died, its
// lease ran out: the 3 a.m. case) there is none, so nothing is dropped. The
// command must not exit 0 then as if it had done what was asked: here the
// queued signal runs as soon as a runtime comes up.
//
// Found by review h67 (2026-11-29): exit 0, "no run to cancel: no process
// holds thread chat-7", and the queued signal "next" ran on the next runtime
// (3 of 3); the command also wrote a drop mark into the thread's inbox (a
// stream with no expiry: a mistyped THREAD or --keyspace leaves it for ever
// when no runtime reads it).
func TestReviewH67DropQueuedWithNoHolder(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	p := redistest.NewProxy(t, srv.Addr())
	b, err := redisstreams.NewURL(ctx, "redis://"+p.Addr(), redisstreams.Options{})
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan string, 10)
	block := func(ctx context.Context, run *signals.Run) error {
		started <- run.Signals[0].ID
		<-ctx.Done()
		return ctx.Err()
	}
	const ttl = time.Second
	rt, err := signals.New(b, block, signals.WithProcessID("web-1"), signals.WithLeaseTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Restore()
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = rt.Close(cctx)
		_ = b.Shutdown(cctx)
	})
	for _, id := range []string{"block", "next"} {
		if _, err := rt.Send(ctx, "chat-7", signals.Signal{ID: id, Type: "msg"}); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the run did not start")
	}
	p.BlackHole() // web-1 is gone, as far as Redis can tell

	ob, err := redisstreams.NewURL(ctx, srv.URL(), redisstreams.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	c, err := signals.NewController(ctx, ob)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	deadline := time.Now().Add(ttl + 10*time.Second)
	for {
		st, err := c.Status(ctx, "chat-7")
		if err != nil {
			t.Fatal(err)
		}
		if st.Owner == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the lease of chat-7 did not run out: %+v", st)
		}
		time.Sleep(50 * time.Millisecond) // polling the server's clock, not injectable
	}

	r := leasebus(t, 20*time.Second, "threads", "cancel", "chat-7", "--drop-queued", "--redis", srv.URL())
	t.Logf("threads cancel --drop-queued: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)

	// A runtime comes up: does the queued signal run?
	ran := make(chan string, 10)
	rt2, err := signals.New(ob, func(ctx context.Context, run *signals.Run) error {
		for _, s := range run.Signals {
			ran <- s.ID
		}
		for {
			s, ok := run.Next(ctx)
			if !ok {
				return nil
			}
			ran <- s.ID
		}
	}, signals.WithProcessID("web-2"), signals.WithLeaseTTL(ttl), signals.WithRecoveryInterval(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = rt2.Close(cctx)
	}()
	nextRan := false
	timeout := time.After(20 * time.Second)
wait:
	for {
		select {
		case id := <-ran:
			t.Logf("web-2 ran %s", id)
			if id == "next" {
				nextRan = true
				break wait
			}
		case <-timeout:
			break wait
		}
	}
	if !nextRan {
		t.Logf("the queued signal did not run within 20s")
		return
	}
	if r.code == exitOK {
		t.Errorf("threads cancel --drop-queued exited 0 (%q), yet the queued signal ran afterwards: nothing was dropped", r.stdout)
	}
	if !strings.Contains(r.stderr, "not dropped") {
		t.Errorf("stderr %q; want it to say the queued signals were not dropped", r.stderr)
	}
}
