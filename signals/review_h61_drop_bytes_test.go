package signals_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

// TestReviewH61DropQueuedAnyBytesAcrossProcesses (review h61, held): on
// redisstreams, for a thread id that is not UTF-8 and for a valid one that
// starts with 1063a0d's mark, a Cancel with DropQueued from another process
// cancels the holder's run (the result names it), the signal queued behind
// it is dropped, not run, and a later signal runs.
func TestReviewH61DropQueuedAnyBytesAcrossProcesses(t *testing.T) {
	srv, _ := startRedis(t)
	for i, thread := range []string{"d\xff\x00{z}", "\x00b64:YWJj"} {
		t.Run(thread, func(t *testing.T) {
			ctx := context.Background()
			opts := redisstreams.Options{Prefix: "h61d" + string(rune('a'+i))}
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
			got := make(chan string, 8)
			agent := func(ctx context.Context, run *signals.Run) error {
				for _, s := range run.Signals {
					got <- run.Thread + "|" + s.ID
					if s.ID == "a1" {
						<-ctx.Done()
						return ctx.Err()
					}
				}
				for {
					s, ok := run.Next(ctx)
					if !ok {
						return nil
					}
					got <- run.Thread + "|" + s.ID
				}
			}
			rtA := newRuntime(t, ba, agent)
			rtB := newRuntime(t, bb, agent)
			if acc, err := rtA.Send(ctx, thread, signals.Signal{ID: "a1", Type: "msg"}); err != nil || acc.Action != signals.Woke {
				t.Fatalf("Send a1 from A: %v, %v; want Woke", acc.Action, err)
			}
			if g := <-got; g != thread+"|a1" {
				t.Fatalf("ran %q", g)
			}
			if acc, err := rtB.Send(ctx, thread, signals.Signal{ID: "b1", Type: "msg"}); err != nil || acc.Action != signals.Forwarded {
				t.Fatalf("Send b1 from B: %v, %v; want Forwarded", acc.Action, err)
			}
			res, err := rtB.Cancel(ctx, thread, "stop\xfe", signals.DropQueued())
			if err != nil || !res.Cancelled || res.RunID == "" {
				t.Fatalf("Cancel(DropQueued) from B: %+v, %v; want the run cancelled", res, err)
			}
			if _, err := rtB.Send(ctx, thread, signals.Signal{ID: "b2", Type: "msg"}); err != nil {
				t.Fatal(err)
			}
			select {
			case g := <-got:
				if g != thread+"|b2" {
					t.Fatalf("ran %q, want %q (b1 was queued before the drop)", g, thread+"|b2")
				}
			case <-time.After(15 * time.Second):
				t.Fatal("b2, sent after the drop, not run within 15s")
			}
		})
	}
}
