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
// promotion each succeed within 15s (retried every 20ms). So do, each on a
// Backend of its own that made no call since before the kill (its own
// default ClusterClient, its map of slots loaded before), a lone Publish
// a GroupBacklog of the topic, a group Subscribe and a fan-out Subscribe:
// each must make the client reload the map itself. (TestClusterFailoverUnderLoad in signals/loadtest found that
// GroupBacklog did not, nor did a Publish sent alone, without a trim due:
// they failed until go-redis's own reload, 60s.)
func TestClusterMasterFailoverResumes(t *testing.T) {
	cl := redistest.StartClusterReplicas(t, 3, 1)
	c := cl.Client(t)
	b := psBackend(t, c, Options{Logger: slog.New(slog.DiscardHandler)})
	ctx := t.Context()
	const topic = "cf-topic"
	// The idle Backends, on the same prefix, each used once now (which
	// loads its client's map of slots) and then not until the promotion.
	// With RetainAll no publish is sent with a trim (otherwise one in up
	// to 256 is, at random, in a pipeline).
	idle := func() *Backend {
		ib := psBackend(t, cl.Client(t), Options{Prefix: b.keys.Prefix(), Retention: pubsub.RetainAll, Logger: slog.New(slog.DiscardHandler)})
		if err := ib.Publish(ctx, topic, pubsub.Event{Type: "t"}); err != nil {
			t.Fatal(err)
		}
		return ib
	}
	idlePub, idleBacklog, idleGroupSub, idleFanSub := idle(), idle(), idle(), idle()
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
		got = map[string]int{} // "<subscription> <event ID>"
	)
	subscribe := func(on *Backend, name string, opts ...pubsub.SubscribeOption) {
		sub, err := on.Subscribe(ctx, topic, func(_ context.Context, e pubsub.Event) error {
			mu.Lock()
			got[name+" "+e.ID]++
			mu.Unlock()
			return nil
		}, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe(context.Background()) })
	}
	subscribe(b, "group", pubsub.Group("g"))
	// Backends that only consume: their reads alone must make their
	// clients reload the map.
	subscribe(idle(), "consumer's group", pubsub.Group("g2"))
	subscribe(idle(), "consumer's fan-out")
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
		took, failed, err := redistest.RetryUntil(bound, f)
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
	// The idle Backends' first calls fail only after go-redis's dial
	// retries to the dead address (1.7-3.3s): both at once.
	var wg sync.WaitGroup
	wg.Go(func() {
		retry("a lone publish on an idle Backend", func() error { return idlePub.Publish(ctx, topic, pubsub.Event{Type: "t"}) })
	})
	wg.Go(func() {
		retry("a backlog on an idle Backend", func() error {
			_, err := idleBacklog.GroupBacklog(ctx, topic, "g")
			return err
		})
	})
	// A Subscribe on an idle Backend: a group's (its group and read guard
	// are created, in one pipeline) and a fan-out one from the latest
	// entry (it asks for the stream's last ID first).
	for _, sc := range []struct {
		name string
		on   *Backend
		opts []pubsub.SubscribeOption
	}{
		{"a group Subscribe on an idle Backend", idleGroupSub, []pubsub.SubscribeOption{pubsub.Group("g3")}},
		{"a fan-out Subscribe on an idle Backend", idleFanSub, nil},
	} {
		wg.Go(func() {
			retry(sc.name, func() error {
				sub, err := sc.on.Subscribe(ctx, topic, func(context.Context, pubsub.Event) error { return nil }, sc.opts...)
				if err == nil {
					t.Cleanup(func() { _ = sub.Unsubscribe(context.Background()) })
				}
				return err
			})
		})
	}
	wg.Wait()
	for _, name := range []string{"group", "consumer's group", "consumer's fan-out"} {
		retry("delivery to the "+name, func() error {
			mu.Lock()
			defer mu.Unlock()
			if got[name+" after"] == 0 {
				return fmt.Errorf("not delivered")
			}
			return nil
		})
	}
	// The killed node back (it rejoins as a replica): go-redis's pools
	// retry dialing a dead address every second from a goroutine of
	// their own, which would outlive the test.
	restartAwaitingRedials(t, victim)
}
