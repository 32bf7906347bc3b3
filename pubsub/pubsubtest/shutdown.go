package pubsubtest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasebus/leasebus/pubsub"
)

// Shutdowner is the optional bounded shutdown of a backend, in the manner of
// net/http Server.Shutdown: it closes the backend like Close, waiting for
// running handlers only until ctx ends, and then returns ctx.Err(). The
// suite checks it on backends that have it (inmem and redisstreams do).
type Shutdowner interface {
	Shutdown(ctx context.Context) error
}

// shutdowner returns ps's Shutdown, skipping t when it has none.
func shutdowner(t *testing.T, ps pubsub.PubSub) Shutdowner {
	t.Helper()
	sd, ok := ps.(Shutdowner)
	if !ok {
		t.Skipf("pubsubtest: %T has no Shutdown(ctx) method", ps)
	}
	return sd
}

// Shutdown with time to spare drains like Close: it cancels the handlers'
// ctx, waits for them and returns nil; afterwards calls return ErrClosed.
func (s *suite) shutdownDrains(t *testing.T) {
	ps := s.backend(t)
	sd := shutdowner(t, ps)
	topic := topicFor(t)
	entered := make(chan struct{}, 1)
	returned := make(chan struct{})
	s.subscribe(t, ps, topic, func(ctx context.Context, _ pubsub.Event) error {
		entered <- struct{}{}
		<-ctx.Done()
		close(returned)
		return ctx.Err()
	})
	s.publish(t, ps, topic, pubsub.Event{Type: "t"})
	s.await(t, entered, "the delivery")
	if err := sd.Shutdown(s.ctx(t)); err != nil {
		t.Fatalf("Shutdown = %v, want nil", err)
	}
	select {
	case <-returned:
	default:
		t.Fatal("Shutdown returned before the handler did")
	}
	if err := ps.Publish(s.ctx(t), topic, pubsub.Event{Type: "t"}); !errors.Is(err, pubsub.ErrClosed) {
		t.Errorf("Publish after Shutdown = %v, want ErrClosed", err)
	}
}

// A handler that ignores its ctx cannot hold Shutdown up: Shutdown returns
// ctx.Err() when ctx ends, the backend is closed, and the stuck delivery is
// not acked even when its handler later returns nil, so (on a backend whose
// events outlive it) another member of the group receives it again.
func (s *suite) shutdownStopsAtCtx(t *testing.T) {
	ps := s.backend(t)
	sd := shutdowner(t, ps)
	peer := s.peer(t, ps)
	topic := topicFor(t)
	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	released := false
	defer func() {
		if !released {
			close(release)
		}
	}()
	var opts []pubsub.SubscribeOption
	if s.f.ConsumerGroups {
		opts = append(opts, pubsub.Group("g"), pubsub.AckDeadline(300*time.Millisecond))
	}
	s.subscribe(t, ps, topic, func(context.Context, pubsub.Event) error {
		entered <- struct{}{}
		<-release // ignores ctx
		return nil
	}, opts...)
	s.publish(t, ps, topic, pubsub.Event{ID: "stuck", Type: "stuck"})
	s.await(t, entered, "the delivery")

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := sd.Shutdown(ctx)
	took := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown with a stuck handler = %v, want context.DeadlineExceeded", err)
	}
	if took > s.c.Timeout {
		t.Errorf("Shutdown took %v after its ctx ended (deadline 200ms)", took)
	}
	if err := ps.Publish(s.ctx(t), topic, pubsub.Event{Type: "t"}); !errors.Is(err, pubsub.ErrClosed) {
		t.Errorf("Publish after Shutdown = %v, want ErrClosed", err)
	}
	// The handler returns nil now; that must not ack the delivery.
	close(release)
	released = true
	if err := ps.Close(); err != nil {
		t.Errorf("Close after Shutdown = %v, want nil", err)
	}
	if !s.f.ConsumerGroups || !s.f.AckDeadline || !s.f.Persistent || peer == ps {
		return
	}
	rec := newRecorder()
	s.subscribe(t, peer, topic, rec.handler("heir"), opts...)
	d := rec.waitN(t, s, 1)[0]
	if d.e.ID != "stuck" || d.e.DeliveryAttempt < 2 {
		t.Errorf("heir got %q attempt %d, want %q as a redelivery", d.e.ID, d.e.DeliveryAttempt, "stuck")
	}
}
