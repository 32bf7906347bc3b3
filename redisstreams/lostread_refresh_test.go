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

// TestLeftPendingLostEntriesNotTakenOver: two lost reads deliver more than
// one read's tokens; recoverLost queues n and leaves the rest pending on the
// consumer for the next check. Found by review 5 of the day: nothing
// refreshed their idle time (as refreshQueued does for prefetched ones),
// and another member of the group took them over after AckDeadline as
// attempt 2, dead-lettered unrun under MaxDeliveries(1). refreshLost now
// keeps them this member's while it checks.
func TestLeftPendingLostEntriesNotTakenOver(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	b, err := NewURL(ctx, srv.URL(), Options{Prefix: psPrefix(), BatchSize: 4, Logger: slog.New(slog.DiscardHandler),
		ConfigureClient: func(o *redis.Options) { o.ReadTimeout = 300 * time.Millisecond }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	var dead, ranA, ranB atomic.Int64
	countDeadLetters(t, b, "t", &dead)
	opts := []pubsub.SubscribeOption{pubsub.Group("g"), pubsub.StartFrom(pubsub.Earliest), pubsub.ReadOnDemand(),
		pubsub.Concurrency(1), pubsub.MaxDeliveries(1), pubsub.AckDeadline(time.Second)}
	a, err := b.Subscribe(ctx, "t", func(ctx context.Context, e pubsub.Event) error {
		ranA.Add(1)
		time.Sleep(300 * time.Millisecond)
		return nil
	}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Unsubscribe(ctx)
	time.Sleep(200 * time.Millisecond)
	const n = 10
	publishXs(t, b, "t", n)
	srv.Pause(t)
	a.(pubsub.Kicker).Kick()
	time.Sleep(1200 * time.Millisecond) // reads time out and are sent again
	srv.Resume(t)
	go func() {
		c := srv.Client(t)
		for i := 0; i < 4; i++ {
			time.Sleep(400 * time.Millisecond)
			ps, err := c.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: b.keys.Stream("t"), Group: "g", Start: "-", End: "+", Count: 100}).Result()
			var line string
			for _, p := range ps {
				line += p.ID[len(p.ID)-3:] + "/" + p.Consumer[len(p.Consumer)-2:] + "/c" + string(rune('0'+p.RetryCount)) + "/" + p.Idle.Round(100*time.Millisecond).String() + " "
			}
			t.Logf("pending +%dms: %s (err %v)", 400*(i+1), line, err)
		}
	}()
	bsub, err := b.Subscribe(ctx, "t", func(ctx context.Context, e pubsub.Event) error {
		ranB.Add(1)
		return nil
	}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer bsub.Unsubscribe(ctx)
	deadline := time.Now().Add(8 * time.Second)
	for ranA.Load()+ranB.Load()+dead.Load() < n && time.Now().Before(deadline) {
		a.(pubsub.Kicker).Kick()
		bsub.(pubsub.Kicker).Kick()
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)
	t.Logf("A ran %d, B ran %d, dead letters %d", ranA.Load(), ranB.Load(), dead.Load())
	if dead.Load() != 0 || ranA.Load()+ranB.Load() != n {
		t.Errorf("%d dead-lettered unrun under MaxDeliveries(1)", dead.Load())
	}
}
