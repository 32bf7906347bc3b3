package redisstreams

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// TestLostReadRecoveredOnce: a read is lost in a stall; the
// server resumes while the read loop sleeps its backoff and stalls again
// (shorter than ReadTimeout) at once. During the second stall both the
// read loop's check (XPENDING in the read pipeline) and the reclaim pass
// (XPENDING IDLE AckDeadline) are sent; both are answered together at the
// resume, both find the lost entries pending on the consumer and not in
// flight, and both queue them: the same entries run twice on one
// Concurrency(1) subscription, once as attempt 1 (recoverLost) and once as
// attempt 2 (claimQueue). Found by review; now a recovery and a claim
// reserve the ids they fetch (reserveLocked), and each entry runs once.
func TestLostReadRecoveredOnce(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	logger, fails := readFailures(slog.Default().Handler())
	b, err := NewURL(ctx, srv.URL(), Options{Prefix: psPrefix(), Logger: logger, BatchSize: 4, ConfigureClient: func(o *redis.Options) {
		o.ReadTimeout = 2 * time.Second
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })

	var mu sync.Mutex
	runs := map[string][]int{}
	var order []string
	sub, err := b.Subscribe(ctx, "t", func(ctx context.Context, e pubsub.Event) error {
		mu.Lock()
		runs[e.ID] = append(runs[e.ID], e.DeliveryAttempt)
		order = append(order, e.Type+"#"+string(rune('0'+e.DeliveryAttempt)))
		mu.Unlock()
		return nil
	}, pubsub.Group("g"), pubsub.StartFrom(pubsub.Earliest), pubsub.ReadOnDemand(),
		pubsub.AckDeadline(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe(ctx)
	time.Sleep(200 * time.Millisecond)
	const n = 3
	for i := 1; i <= n; i++ {
		if err := b.Publish(ctx, "t", pubsub.Event{Type: "e" + string(rune('0'+i))}); err != nil {
			t.Fatal(err)
		}
	}
	srv.Pause(t)
	sub.(pubsub.Kicker).Kick()
	for i := 0; i < 5; i++ {
		<-fails
	}
	srv.Resume(t) // the lost read runs; the read loop sleeps 160..320ms
	time.Sleep(20 * time.Millisecond)
	sub.(pubsub.Kicker).Kick() // the reclaim pass runs only while kicked
	srv.Pause(t)
	time.Sleep(600 * time.Millisecond)
	srv.Resume(t)
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		sub.(pubsub.Kicker).Kick()
		time.Sleep(50 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("handled (type#attempt): %v", order)
	for id, a := range runs {
		if len(a) > 1 {
			t.Errorf("entry %s ran %d times on one subscription (attempts %v)", id, len(a), a)
		}
	}
	if len(runs) != n {
		t.Errorf("ran %d distinct entries, want %d", len(runs), n)
	}
}
