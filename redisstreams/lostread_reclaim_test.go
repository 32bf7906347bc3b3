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

// TestStallLongerThanBackoffDeadLettersNothing: the stall of
// TestStalledReadDeadLettersNothingUnrun, long enough that the read loop's
// backoff has grown (ReadTimeout 150ms so that it takes 3s, not 25s with
// go-redis's 3s default): after the server resumes, the read loop sleeps
// its backoff before the check that would recover the lost entries, while
// the subscription's own reclaim pass (every AckDeadline/2) claims them as
// stale: attempt 2, dead-lettered unrun under MaxDeliveries(1). Found by
// review; now the reclaim pass leaves a lost read's entries to the read
// loop while it is checking.
func TestStallLongerThanBackoffDeadLettersNothing(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	logger, fails := readFailures(slog.Default().Handler())
	b, err := NewURL(ctx, srv.URL(), Options{Prefix: psPrefix(), Logger: logger, ConfigureClient: func(o *redis.Options) {
		o.ReadTimeout = 150 * time.Millisecond
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })

	var dead atomic.Int64
	countDeadLetters(t, b, "t", &dead)

	var ran atomic.Int64
	sub, err := b.Subscribe(ctx, "t", func(ctx context.Context, e pubsub.Event) error {
		ran.Add(1)
		t.Logf("%s ran %s attempt %d", time.Now().Format("15:04:05.000"), e.Type, e.DeliveryAttempt)
		return nil
	}, pubsub.Group("g"), pubsub.StartFrom(pubsub.Earliest), pubsub.ReadOnDemand(),
		pubsub.MaxDeliveries(1), pubsub.AckDeadline(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe(ctx)
	time.Sleep(200 * time.Millisecond)

	const n = 3
	publishXs(t, b, "t", n)
	srv.Pause(t)
	sub.(pubsub.Kicker).Kick()
	// Resume right after the 8th failed read: the read loop then sleeps
	// its backoff (1s..2s) before its next read.
	for i := 0; i < 8; i++ {
		<-fails
	}
	srv.Resume(t)
	t.Logf("%s resumed", time.Now().Format("15:04:05.000"))
	deadline := time.Now().Add(10 * time.Second)
	for ran.Load()+dead.Load() < n && time.Now().Before(deadline) {
		sub.(pubsub.Kicker).Kick()
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)
	t.Logf("handler ran %d, dead letters %d", ran.Load(), dead.Load())
	if ran.Load() != n {
		t.Errorf("handler ran %d of %d entries; %d dead-lettered unrun under MaxDeliveries(1)", ran.Load(), n, dead.Load())
	}
}
