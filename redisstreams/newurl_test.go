package redisstreams

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// TestNewURLPublishForWithTrimAndFlush: the README's client (NewURL, RESP3,
// context timeouts) on the local redis-server: PublishFor and PublishBatch
// with trim.lua on every publish (Retention 4) and PEXPIRE, coalesced with
// plain publishes, through a SCRIPT FLUSH, and a group subscription reading
// on demand gets every inbox entry.
func TestNewURLPublishForWithTrimAndFlush(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	b, err := NewURL(ctx, srv.URL(), Options{Prefix: psPrefix(), Retention: 4, StreamIdleTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	// Drop the script cache midway: trim.lua then answers NOSCRIPT once.
	var got atomic.Int64
	sub, err := b.Subscribe(ctx, "inbox", func(ctx context.Context, e pubsub.Event) error { got.Add(1); return nil },
		pubsub.Group("g"), pubsub.StartFrom(pubsub.Earliest), pubsub.ReadOnDemand())
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe(ctx)
	var wg sync.WaitGroup
	var fails atomic.Int64
	for i := 0; i < 6; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for j := 0; j < 100; j++ {
				if i == 0 && j == 50 {
					b.Client().ScriptFlush(ctx)
				}
				var err error
				switch i % 3 {
				case 0:
					err = b.PublishFor(ctx, "inbox", "g", pubsub.Event{Type: "t"})
				case 1:
					err = b.PublishBatch(ctx, []pubsub.Publication{
						{Topic: "inbox", Group: "g", Event: pubsub.Event{Type: "t"}},
						{Topic: "work", Event: pubsub.Event{Type: "n"}},
					})
				default:
					err = b.Publish(ctx, "other", pubsub.Event{Type: "t"})
				}
				if err != nil {
					fails.Add(1)
					t.Log(err)
				}
				sub.(pubsub.Kicker).Kick()
			}
		}(i)
	}
	wg.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for got.Load() < 400 && time.Now().Before(deadline) {
		sub.(pubsub.Kicker).Kick()
		time.Sleep(20 * time.Millisecond)
	}
	if fails.Load() != 0 || got.Load() != 400 {
		t.Errorf("fails %d, inbox deliveries %d of 400", fails.Load(), got.Load())
	}
}

// TestNewURLRefusesClusterNode: NewURL given the URL of one node of a Redis
// Cluster returns an error wrapping ErrInvalid that names the Cluster and
// the way to use one (New with a *redis.ClusterClient), and hides the
// URL's password. Before, it returned a Backend on that one node: a
// listing of leases quietly showed that node's share (2 of 6 on a 3-master
// Cluster: review h54, through "leasebus leases"), and calls on keys of
// other nodes failed with a bare MOVED. A standalone server is still
// accepted (every other NewURL test).
func TestNewURLRefusesClusterNode(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	addr := c.Addrs()[0]
	for _, u := range []string{"redis://" + addr, "redis://:s3cret@" + addr} {
		b, err := NewURL(t.Context(), u, Options{})
		if err == nil {
			_ = b.Close()
			t.Fatalf("NewURL(%s) on a Cluster node returned a Backend", u)
		}
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "Redis Cluster") ||
			!strings.Contains(err.Error(), "ClusterClient") || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("NewURL(%s) on a Cluster node = %v; want ErrInvalid naming the Cluster and ClusterClient, without the password", u, err)
		}
	}
}
