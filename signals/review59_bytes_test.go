package signals_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

// TestReview59ThreadIDAnyBytes sends to threads whose ids hold bytes that
// are not UTF-8 (DESIGN: user-given names, thread ids included, may hold any
// bytes), a signal whose ID is not UTF-8 and one whose Metadata is not, on redisstreams through a
// NewURL client. Each Send must either run its signal or fail with an error
// wrapping signals.ErrInvalid that names the field (Send's doc: bad input
// returns an error wrapping ErrInvalid).
func TestReview59ThreadIDAnyBytes(t *testing.T) {
	srv, _ := startRedis(t)
	ctx := context.Background()
	b, err := redisstreams.NewURL(ctx, srv.URL(), redisstreams.Options{Prefix: "r59"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	got := make(chan string, 16)
	agent := func(ctx context.Context, run *signals.Run) error {
		for _, s := range run.Signals {
			got <- run.Thread + "|" + s.ID
		}
		for {
			s, ok := run.Next(ctx)
			if !ok {
				return nil
			}
			got <- run.Thread + "|" + s.ID
		}
	}
	rt := newRuntime(t, b, agent)
	for _, tc := range []struct {
		name, thread, id string
		md               map[string]string
	}{
		{"thread not UTF-8", "t\xff\xfe", "s1", nil},
		{"thread NUL and braces", "t\x00{x}:y", "s2", nil},
		{"signal ID not UTF-8", "t-ok", "s\xff3", nil},
		{"signal metadata not UTF-8", "t-ok2", "s4", map[string]string{"k": "v\xff"}},
		{"thread 16 KiB", strings.Repeat("{:}\xff", 4<<10), "s5", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := rt.Send(ctx, tc.thread, signals.Signal{ID: tc.id, Type: "msg", Metadata: tc.md})
			if err != nil {
				if !errors.Is(err, signals.ErrInvalid) {
					t.Fatalf("Send(%q, id %q): %v; want it run, or an error wrapping signals.ErrInvalid", tc.thread, tc.id, err)
				}
				return
			}
			select {
			case g := <-got:
				if g != tc.thread+"|"+tc.id {
					t.Fatalf("ran %q, want %q", g, tc.thread+"|"+tc.id)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("signal %q of thread %q accepted and not run within 10s", tc.id, tc.thread)
			}
		})
	}
}

// TestReview59ThreadIDAnyBytesAcrossProcesses: a thread whose id is not
// UTF-8, held by one runtime: a Send from another is forwarded to its run,
// and a Cancel from the other (with a reason that is not UTF-8 either)
// reaches that run, whose cause names the thread and the reason.
func TestReview59ThreadIDAnyBytesAcrossProcesses(t *testing.T) {
	srv, _ := startRedis(t)
	ctx := context.Background()
	opts := redisstreams.Options{Prefix: "r59x"}
	ba, err := redisstreams.NewURL(ctx, srv.URL(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ba.Close() })
	bb, err := redisstreams.NewURL(ctx, srv.URL(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bb.Close() })
	const thread, reason = "x\xff{y}", "stop\xfe"
	got := make(chan string, 4)
	causes := make(chan error, 1)
	agent := func(ctx context.Context, run *signals.Run) error {
		for _, s := range run.Signals {
			got <- s.ID
		}
		for {
			s, ok := run.Next(ctx)
			if !ok {
				if ctx.Err() != nil {
					causes <- context.Cause(ctx)
					<-ctx.Done()
				}
				return nil
			}
			got <- s.ID
		}
	}
	rtA := newRuntime(t, ba, agent, signals.WithLinger(time.Minute), signals.WithNextWait(time.Minute))
	rtB := newRuntime(t, bb, agent)
	if acc, err := rtA.Send(ctx, thread, signals.Signal{ID: "a1", Type: "msg"}); err != nil || acc.Action != signals.Woke {
		t.Fatalf("Send from A: %v, %v; want Woke", acc.Action, err)
	}
	if id := <-got; id != "a1" {
		t.Fatalf("ran %q, want a1", id)
	}
	acc, err := rtB.Send(ctx, thread, signals.Signal{ID: "b1", Type: "msg"})
	if err != nil || acc.Action != signals.Forwarded {
		t.Fatalf("Send from B: %v, %v; want Forwarded", acc.Action, err)
	}
	select {
	case id := <-got:
		if id != "b1" {
			t.Fatalf("ran %q, want b1", id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("forwarded signal not run within 10s")
	}
	res, err := rtB.Cancel(ctx, thread, reason)
	if err != nil || !res.Cancelled {
		t.Fatalf("Cancel from B: %+v, %v; want Cancelled", res, err)
	}
	select {
	case cause := <-causes:
		var ce *signals.CancelError
		if !errors.As(cause, &ce) || ce.Thread != thread || ce.Reason != reason {
			t.Fatalf("run's cause %v, want a CancelError of thread %q, reason %q", cause, thread, reason)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run not cancelled within 10s")
	}
}
