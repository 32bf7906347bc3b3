package redisstreams

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// TestUnsubscribeWhileSuspectHandsBackLost: a member's read is lost in a
// stall and the member is stopped (Unsubscribe, as a Close would) before
// its next read recovered the entries. cleanup hands back only what is in
// inflight; the lost entries stay pending on its consumer, counted as
// delivered once, so the member that takes over (ClaimPending, the
// signals inbox pattern) sees attempt 2 and, under MaxDeliveries(1),
// dead-letters them although nobody ever ran them. Found by review; now
// cleanup also hands back, with that delivery undone, what lost reads left
// on the consumer (handBackUnseen).
func TestUnsubscribeWhileSuspectHandsBackLost(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	logger, fails := readFailures(slog.Default().Handler())
	b, err := NewURL(ctx, srv.URL(), Options{Prefix: psPrefix(), Logger: logger, ConfigureClient: func(o *redis.Options) {
		o.ReadTimeout = 500 * time.Millisecond
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })

	var dead, ran atomic.Int64
	countDeadLetters(t, b, "t", &dead)

	h := func(ctx context.Context, e pubsub.Event) error {
		ran.Add(1)
		t.Logf("ran %s attempt %d", e.Type, e.DeliveryAttempt)
		return nil
	}
	opts := []pubsub.SubscribeOption{pubsub.Group("g"), pubsub.StartFrom(pubsub.Earliest), pubsub.ReadOnDemand(),
		pubsub.ClaimPending(), pubsub.MaxDeliveries(1), pubsub.AckDeadline(time.Second)}
	sub, err := b.Subscribe(ctx, "t", h, opts...)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	const n = 3
	publishXs(t, b, "t", n)
	srv.Pause(t)
	sub.(pubsub.Kicker).Kick()
	<-fails
	<-fails
	unsubDone := make(chan error, 1)
	go func() { unsubDone <- sub.Unsubscribe(ctx) }()
	time.Sleep(100 * time.Millisecond)
	srv.Resume(t)
	if err := <-unsubDone; err != nil {
		t.Logf("unsubscribe: %v", err)
	}
	// The successor (a new member, as a restarted runtime would be).
	sub2, err := b.Subscribe(ctx, "t", h, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer sub2.Unsubscribe(ctx)
	deadline := time.Now().Add(5 * time.Second)
	for ran.Load()+dead.Load() < n && time.Now().Before(deadline) {
		sub2.(pubsub.Kicker).Kick()
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond)
	t.Logf("handler ran %d, dead letters %d", ran.Load(), dead.Load())
	if ran.Load() != n {
		t.Errorf("handler ran %d of %d entries; %d dead-lettered unrun under MaxDeliveries(1)", ran.Load(), n, dead.Load())
	}
}
