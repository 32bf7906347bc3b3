package redisstreams

import (
	"context"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// TestCloseOnBlackHoleWithAckQueued: a Backend from NewURL (go-redis's
// default timeouts) whose Redis stops answering (a black hole) right as a
// handler acks. Close must return within closeOnBlackHoleBound: the
// subscription's cleanup gives up after 10s and the acker after
// ackCloseGrace; the unwritten ack leaves the entry pending, so after the
// network comes back another member gets it again (at-least-once). Found
// by review: the acker retried on context.Background(), and Close took 6
// minutes.
func TestCloseOnBlackHoleWithAckQueued(t *testing.T) {
	t.Parallel()
	redistest.Require(t)
	srv := redistest.Start(t, redistest.Options{})
	proxy := redistest.NewProxy(t, srv.Addr())
	ctx := context.Background()
	prefix := psPrefix()
	b, err := NewURL(ctx, "redis://"+proxy.Addr()+"/0", Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{}, 1)
	release := make(chan struct{})
	_, err = b.Subscribe(ctx, "t", func(ctx context.Context, e pubsub.Event) error {
		started <- struct{}{}
		<-release
		return nil
	}, pubsub.Group("g"), pubsub.StartFrom(pubsub.Earliest), pubsub.AckDeadline(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Publish(ctx, "t", pubsub.Event{ID: "x", Type: "x"}); err != nil {
		t.Fatal(err)
	}
	<-started
	proxy.BlackHole()
	close(release) // the ack is queued on a black-holed server
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- b.Close() }()
	select {
	case err := <-done:
		t.Logf("Close() = %v after %v", err, time.Since(start).Round(time.Millisecond))
	case <-time.After(closeOnBlackHoleBound):
		proxy.Restore()
		<-done
		t.Fatalf("Close() still blocked %v after the black hole began", closeOnBlackHoleBound)
	}
	proxy.Restore()

	// The entry was not acked: another member gets it again.
	b2 := psBackend(t, srv.Client(t), Options{Prefix: prefix})
	got := make(chan pubsub.Event, 1)
	sub, err := b2.Subscribe(ctx, "t", func(ctx context.Context, e pubsub.Event) error {
		select {
		case got <- e:
		default:
		}
		return nil
	}, pubsub.Group("g"), pubsub.AckDeadline(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe(ctx)
	select {
	case e := <-got:
		if e.ID != "x" || e.DeliveryAttempt < 2 {
			t.Errorf("got %s attempt %d, want x again as a redelivery", e.ID, e.DeliveryAttempt)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the entry whose ack was given up on was not delivered again within 20s")
	}
}

// closeOnBlackHoleBound bounds Close on a Redis that stopped answering: the
// subscriptions' cleanup (10s), then the acker (ackCloseGrace, 10s), with
// room for one command in flight at each step.
const closeOnBlackHoleBound = 40 * time.Second
