package redisstreams

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// TestClusterMasterFailoverResumes: a Backend on a default ClusterClient,
// without the sync options, as most users run it. A master dies (SIGKILL)
// and the Cluster promotes its replica. go-redis's own routing keeps
// sending that master's slots to the dead node until it reloads its map of
// slots, which it does on its own only every ClusterStateReloadInterval
// (60s by default): review AA saw an XLEN fail 38-53s after the kill.
// Asserted: once the promoted replica answers ROLE as master, a publish,
// a renewal of a lease held across the failover, an acquire of a new lease
// and a group subscription's delivery of an event published after the
// promotion each succeed within 15s (retried every 20ms).
func TestClusterMasterFailoverResumes(t *testing.T) {
	cl := redistest.StartClusterReplicas(t, 3, 1)
	c := cl.Client(t)
	b := psBackend(t, c, Options{Logger: slog.New(slog.DiscardHandler)})
	ctx := t.Context()
	const topic = "cf-topic"
	m, err := c.MasterForKey(ctx, b.keys.Stream(topic))
	if err != nil {
		t.Fatal(err)
	}
	addr := m.Options().Addr
	onMaster := func(prefix string) string {
		for i := 0; ; i++ {
			n := fmt.Sprint(prefix, i)
			if lm, err := c.MasterForKey(ctx, b.keys.Lease(n)); err == nil && lm.Options().Addr == addr {
				return n
			}
		}
	}
	held, fresh := onMaster("cf-held"), onMaster("cf-new")
	if res, err := b.AcquireLease(ctx, held, "o", time.Minute); err != nil || !res.Acquired {
		t.Fatalf("acquire %s: %+v, %v", held, res, err)
	}
	var (
		mu  sync.Mutex
		got = map[string]int{}
	)
	sub, err := b.Subscribe(ctx, topic, func(_ context.Context, e pubsub.Event) error {
		mu.Lock()
		got[e.ID]++
		mu.Unlock()
		return nil
	}, pubsub.Group("g"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe(context.Background()) }()
	replicas := cl.ReplicasOf(t, addr)
	if len(replicas) != 1 {
		t.Fatalf("replicas of %s: %d, want 1", addr, len(replicas))
	}
	// The replica has what the master had (the lease, the group).
	awaitSyncedClient(t, m)
	victim, _ := killAndAwaitPromotion(t, cl, addr, replicas)
	const bound = 15 * time.Second
	retry := func(what string, f func() error) {
		t.Helper()
		took, failed, err := retryUntil(bound, f)
		if err != nil {
			t.Errorf("%s: %d calls in %v after the promotion all failed, the last with: %v", what, failed, bound, err)
			return
		}
		t.Logf("%s succeeded %v after the promotion (%d calls failed first)", what, took.Round(time.Millisecond), failed)
	}
	retry("renew", func() error {
		ok, err := b.RenewLease(ctx, held, "o", time.Minute)
		if err == nil && !ok {
			return fmt.Errorf("not held")
		}
		return err
	})
	retry("acquire", func() error {
		res, err := b.AcquireLease(ctx, fresh, "o", time.Minute)
		if err == nil && !res.Acquired {
			return fmt.Errorf("not acquired: %+v", res)
		}
		return err
	})
	retry("publish", func() error { return b.Publish(ctx, topic, pubsub.Event{ID: "after", Type: "t"}) })
	retry("delivery", func() error {
		mu.Lock()
		defer mu.Unlock()
		if got["after"] == 0 {
			return fmt.Errorf("not delivered")
		}
		return nil
	})
	// The killed node back (it rejoins as a replica): go-redis's pools
	// retry dialing a dead address every second from a goroutine of
	// their own, which would outlive the test.
	victim.Restart(t)
}
