package signals_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasebus/leasebus/pubsub"
	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

// TestAfterReleaseNoTenuresForKeptInbox: a released tenure looks at its
// inbox once more and takes the thread again only when a signal waits in
// it. An inbox kept for another reason (here, another consumer group that
// some tool subscribed with) is not deleted, yet nothing waits for the
// runtime: no tenure may start for it. Before the backlog check, every
// tenure's end started the next one, one per linger time, for as long as
// the other group existed.
func TestAfterReleaseNoTenuresForKeptInbox(t *testing.T) {
	srv, _ := startRedis(t)
	ctx := context.Background()
	b, err := redisstreams.NewURL(ctx, srv.URL(), redisstreams.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	const thread = "kept"
	var ran, tenures atomic.Int64
	agent := func(ctx context.Context, run *signals.Run) error {
		return eachSignal(ctx, run, func(signals.Signal) { ran.Add(1) })
	}
	rt := newRuntime(t, b, agent, signals.WithObserver(func(e signals.Event) {
		if e.Thread == thread && (e.Kind == signals.TenureStarted || e.Kind == signals.Recovered) {
			tenures.Add(1)
		}
	}))
	other, err := b.Subscribe(ctx, signals.InboxTopic(thread), func(context.Context, pubsub.Event) error { return nil },
		pubsub.Group("some-tool"), pubsub.StartFrom(pubsub.Earliest))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Unsubscribe(ctx)
	if _, err := rt.Send(ctx, thread, signals.Signal{ID: "s1", Type: "msg"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "s1 ran", func() bool { return ran.Load() == 1 })
	time.Sleep(time.Second) // 20 linger times of 50ms
	if n := tenures.Load(); n != 1 {
		t.Fatalf("%d tenures of the thread for one signal (linger 50ms, 1s idle), want 1", n)
	}
}
