package signals_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

// TestSendWokeDuringClose: a Send whose acquire started a tenure just
// before Close began. Found by review: it returned Woke, the tenure stopped
// at once (closing) without reading the signal, and the "woke" notice kept
// every peer's handler off the lease for a recovery interval, then its nack
// waited another one (2.46s with a 2s interval). A live peer must run it
// within one recovery interval after Close returns, as it runs the signals
// queued before Close, and Send must not report that this process runs it.
func TestSendWokeDuringClose(t *testing.T) {
	_, c := startRedis(t)
	b, err := redisstreams.New(c, redisstreams.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	const recovery = 2 * time.Second
	opts := []signals.Option{signals.WithLeaseTTL(10 * time.Second), signals.WithRecoveryInterval(recovery)}
	ranOn := make(chan string, 4)
	agent := func(proc string) signals.Agent {
		return func(ctx context.Context, run *signals.Run) error { ranOn <- proc; return nil }
	}
	a, err := signals.New(slowInbox{b, 300 * time.Millisecond}, agent("A"), append(opts, signals.WithProcessID("A"))...)
	if err != nil {
		t.Fatal(err)
	}
	newRuntime(t, b, agent("B"), append(opts, signals.WithProcessID("B"))...)
	type res struct {
		acc signals.Accepted
		err error
	}
	sent := make(chan res, 1)
	go func() {
		acc, err := a.Send(context.Background(), "t", sig("s1"))
		sent <- res{acc, err}
	}()
	time.Sleep(100 * time.Millisecond) // acquired; the publish is out
	if err := a.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	closedAt := time.Now()
	r := <-sent
	t.Logf("Send during Close: %+v, %v (returned %v after Close returned)", r.acc, r.err, time.Since(closedAt))
	if r.err != nil {
		t.Fatalf("Send during Close: %v; want it stored (the acquire came before Close)", r.err)
	}
	if r.acc.Action != signals.Forwarded {
		t.Errorf("Send during Close: %v; want Forwarded (this process runs nothing more)", r.acc.Action)
	}
	select {
	case p := <-ranOn:
		d := time.Since(closedAt)
		t.Logf("ran on %s %v after Close returned", p, d)
		if d > recovery {
			t.Fatalf("the signal ran %v after Close returned, more than one recovery interval (%v)", d, recovery)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("signal did not run within 20s")
	}
}
