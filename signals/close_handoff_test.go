package signals_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

// TestCloseDuringHandOffStartsNoRun: a tenure has taken the next delivery
// (the hand-off, before TransferLease) when Close begins: Close starts no
// run, so that signal's run must not start (found by review: the loop
// checked only as it took the delivery). The hook only widens the window
// of one TransferLease round trip.
func TestCloseDuringHandOffStartsNoRun(t *testing.T) {
	_, c := startRedis(t)
	b, err := redisstreams.New(c, redisstreams.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	var closing atomic.Bool
	var late atomic.Int64
	ran := make(chan string, 10)
	atHandOff, release := make(chan struct{}, 1), make(chan struct{})
	rt, err := signals.New(b, func(ctx context.Context, run *signals.Run) error {
		if closing.Load() && run.Thread == "t" {
			late.Add(1)
		}
		for _, s := range run.Signals {
			ran <- s.ID
		}
		return nil
	}, signals.WithLeaseTTL(2*time.Second), signals.WithHooks(signals.Hooks{
		BeforeHandOff: func(string) {
			select {
			case atHandOff <- struct{}{}:
			default:
			}
			<-release
		},
	}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, id := range []string{"s1", "s2"} {
		if _, err := rt.Send(ctx, "t", sig(id)); err != nil {
			t.Fatal(err)
		}
	}
	<-ran
	<-atHandOff
	closing.Store(true)
	closed := make(chan error, 1)
	go func() { closed <- rt.Close(ctx) }()
	for {
		if _, err := rt.Status(ctx, "other"); err != nil {
			break // Close has begun
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if n := late.Load(); n != 0 {
		t.Fatalf("%d run(s) started after Close began", n)
	}
}
