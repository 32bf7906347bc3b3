package redisstreams

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// TestSyncClusterFollowsSlotMove: with PublishSyncReplicas and
// LeaseSyncReplicas on a Cluster, the synced calls go to the key's master's
// own client, which does not follow MOVED. After an operator moved a slot
// to another master (resharding: SETSLOT IMPORTING/MIGRATING, MIGRATE,
// SETSLOT NODE), the default ClusterClient's map of slots still names the
// old master, and go-redis loads it again on its own only every
// ClusterStateReloadInterval (60s by default). Before execSynced asked for
// a reload on MOVED, every synced publish and renewal of the moved slot
// failed with MOVED for that long (a held lease was lost at its deadline).
// Asserted, one slot move per call with nothing else in between that
// would reload the map: a publish retried every 20ms succeeds within 10s
// of the move; a renewal of a lease held across the move, retried the same
// way, succeeds within 10s; a group subscription (its reads synced) gets
// every event published before, during (the source answering ASK: see
// TestSyncClusterFollowsAsk) and after its slot moved, once each.
func TestSyncClusterFollowsSlotMove(t *testing.T) {
	cl := redistest.StartClusterReplicas(t, 3, 1)
	c := cl.Client(t)
	b := psBackend(t, c, Options{PublishSyncReplicas: 1, LeaseSyncReplicas: 1, Logger: slog.New(slog.DiscardHandler)})
	ctx := t.Context()
	const bound = 10 * time.Second
	// retry is retryUntil, failing t when no call succeeded.
	retry := func(t *testing.T, what string, f func() error) (time.Duration, int) {
		t.Helper()
		took, failed, err := redistest.RetryUntil(bound, f)
		if err != nil {
			t.Fatalf("%s: %d calls in %v after the slot moved all failed, the last with: %v", what, failed, bound, err)
		}
		return took, failed
	}

	t.Run("publish", func(t *testing.T) {
		const topic = "move-pub"
		awaitSynced(t, b, topic)
		moveSlotSynced(t, cl, c, b.keys.Stream(topic))
		d, failed := retry(t, "publish", func() error { return b.Publish(ctx, topic, pubsub.Event{ID: "after", Type: "t"}) })
		t.Logf("publish succeeded %v after the move (%d calls failed first)", d.Round(time.Millisecond), failed)
	})

	t.Run("renew", func(t *testing.T) {
		const name = "move-lease"
		var r bool
		retry(t, "acquire", func() error {
			res, err := b.AcquireLease(ctx, name, "o", time.Minute)
			if err == nil && !res.Acquired {
				err = fmt.Errorf("not acquired: %+v", res)
			}
			return err
		})
		moveSlotSynced(t, cl, c, b.keys.Lease(name))
		d, failed := retry(t, "renew", func() error {
			ok, err := b.RenewLease(ctx, name, "o", time.Minute)
			if err == nil && !ok {
				err = fmt.Errorf("renewal reported the lease not held")
			}
			r = ok
			return err
		})
		t.Logf("renewal succeeded (%v) %v after the move (%d calls failed first)", r, d.Round(time.Millisecond), failed)
	})

	t.Run("group", func(t *testing.T) {
		const topic = "move-group"
		awaitSynced(t, b, topic)
		var (
			mu  sync.Mutex
			got = map[string]int{}
		)
		arrived := make(chan struct{}, 16)
		sub, err := b.Subscribe(ctx, topic, func(_ context.Context, e pubsub.Event) error {
			mu.Lock()
			got[e.ID]++
			mu.Unlock()
			arrived <- struct{}{}
			return nil
		}, pubsub.Group("g"))
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = sub.Unsubscribe(context.Background()) }()
		awaitDelivered := func(id string) {
			t.Helper()
			deadline := time.After(bound)
			for {
				mu.Lock()
				n := got[id]
				mu.Unlock()
				if n > 0 {
					return
				}
				select {
				case <-arrived:
				case <-deadline:
					t.Fatalf("%s not delivered within %v", id, bound)
				}
			}
		}
		retry(t, "publish before", func() error { return b.Publish(ctx, topic, pubsub.Event{ID: "before", Type: "t"}) })
		awaitDelivered("before")
		finish := beginSlotMove(t, cl, b.keys.Stream(topic))
		// While the slot moves, the source answers ASK: the publish and
		// the group's reads follow it to the target
		// (TestSyncClusterFollowsAsk).
		if err := b.Publish(ctx, topic, pubsub.Event{ID: "during", Type: "t"}); err != nil {
			t.Errorf("publish while the slot moves: %v, want nil", err)
		}
		awaitDelivered("during")
		finish()
		retry(t, "publish after", func() error { return b.Publish(ctx, topic, pubsub.Event{ID: "after", Type: "t"}) })
		awaitDelivered("after")
		time.Sleep(200 * time.Millisecond) // a repeat would come about now
		mu.Lock()
		defer mu.Unlock()
		for id, n := range got {
			if n != 1 {
				t.Errorf("%s delivered %d times, want once", id, n)
			}
		}
	})
}

// moveSlotSynced moves the hash slot of key from its master to another
// master of cl, as redis-cli's resharding does (redistest.SlotMove): SETSLOT
// IMPORTING on the target, MIGRATING on the source, MIGRATE of each of the
// slot's keys, then SETSLOT NODE on every master. It leaves c's map of slots
// as it was (the move talks to each master through a client of its own).
func moveSlotSynced(t *testing.T, cl *redistest.Cluster, c *redis.ClusterClient, key string) {
	t.Helper()
	beginSlotMove(t, cl, key)()
}

// beginSlotMove is moveSlotSynced up to the SETSLOT NODEs: the slot's keys
// are on the target and the source answers ASK for them. It returns a func
// that ends the move.
func beginSlotMove(t *testing.T, cl *redistest.Cluster, key string) (finish func()) {
	t.Helper()
	m := cl.StartSlotMove(t, key)
	if m.MigrateRest() == 0 {
		t.Fatalf("no keys in slot %d", m.Slot)
	}
	return func() {
		t.Helper()
		m.Finish()
		t.Logf("slot %d (%d keys migrated) moved from %s to %s", m.Slot, m.Moved(), m.From, m.To)
	}
}
