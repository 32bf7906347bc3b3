package signals_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

// TestTwoDropCancelsOutOfOrder: two Cancel(DropQueued) calls on one
// thread whose requests reach the owner in the other order than their drop
// marks lie in the inbox (the first caller's request is slower). The owner's
// agent takes a moment to stop after its ctx ends (it must stop, and does,
// 500ms later). Cancel B returns Cancelled with DropQueued: every signal
// queued before its mark must be dropped ("the owner then records and acks,
// without running, every entry before the mark", signals/doc.go, Control).
// Found by review 6 of 2026-11-22: the owner kept only the mark of the
// request that came last, so reading A's mark ended the drop and s2 ran
// (5 of 5 runs); now every requested mark keeps the drop on until read.
func TestTwoDropCancelsOutOfOrder(t *testing.T) {
	srv, _ := startRedis(t)
	ctx := context.Background()
	b, err := redisstreams.NewURL(ctx, srv.URL(), redisstreams.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	ran := make(chan string, 100)
	agent := func(ctx context.Context, run *signals.Run) error {
		for _, s := range run.Signals {
			ran <- s.ID
			if s.ID == "s0" {
				<-ctx.Done()
				time.Sleep(500 * time.Millisecond) // cleaning up before it returns
			}
		}
		return nil
	}
	rt := newRuntime(t, b, agent, signals.WithLinger(30*time.Second), signals.WithProcessID("owner"))
	if _, err := rt.Send(ctx, "t", sig("s0")); err != nil {
		t.Fatal(err)
	}
	if got := <-ran; got != "s0" {
		t.Fatalf("ran %s", got)
	}
	if _, err := rt.Send(ctx, "t", sig("s1")); err != nil {
		t.Fatal(err)
	}
	ctlA, err := signals.NewController(ctx, slowCancelReq{b, 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ctlA.Close() })
	ctlB, err := signals.NewController(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ctlB.Close() })
	doneA := make(chan error, 1)
	go func() {
		res, err := ctlA.Cancel(ctx, "t", "a", signals.DropQueued())
		t.Logf("Cancel A = %+v, %v", res, err)
		doneA <- err
	}()
	time.Sleep(50 * time.Millisecond) // A's mark is in the inbox, its request on its way
	if _, err := rt.Send(ctx, "t", sig("s2")); err != nil {
		t.Fatal(err)
	}
	resB, err := ctlB.Cancel(ctx, "t", "b", signals.DropQueued())
	t.Logf("Cancel B = %+v, %v", resB, err)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-doneA; err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Send(ctx, "t", sig("s3")); err != nil { // after both returned: runs
		t.Fatal(err)
	}
	var got []string
	timeout := time.After(5 * time.Second)
	for {
		select {
		case id := <-ran:
			got = append(got, id)
			if id == "s3" {
				for _, id := range got {
					if id == "s1" || id == "s2" {
						t.Fatalf("ran %v after the two Cancel(DropQueued): %s was queued before Cancel B's mark and B returned Cancelled=%v", got, id, resB.Cancelled)
					}
				}
				t.Logf("ran %v", got)
				return
			}
		case <-timeout:
			t.Fatalf("s3 did not run; ran %v", got)
		}
	}
}
