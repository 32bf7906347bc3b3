package redisstreams

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/keys"
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
		finish := beginSlotMove(t, cl, c, b.keys.Stream(topic))
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
// master of cl, as redis-cli's resharding does: SETSLOT IMPORTING on the
// target, MIGRATING on the source, MIGRATE of each of the slot's keys,
// then SETSLOT NODE on every master. It leaves c's map of slots as it was
// (it talks to each master through a client of its own).
func moveSlotSynced(t *testing.T, cl *redistest.Cluster, c *redis.ClusterClient, key string) {
	t.Helper()
	beginSlotMove(t, cl, c, key)()
}

// beginSlotMove is moveSlotSynced up to the SETSLOT NODEs: the slot's keys
// are on the target and the source answers ASK for them. It returns a func
// that ends the move.
func beginSlotMove(t *testing.T, cl *redistest.Cluster, c *redis.ClusterClient, key string) (finish func()) {
	t.Helper()
	m := startSlotMove(t, cl, c, key)
	if m.migrateRest() == 0 {
		t.Fatalf("no keys in slot %d", m.slot)
	}
	return m.finish
}

// slotMove is a migration of one hash slot between two masters of a
// Cluster, as redis-cli's resharding runs it, one step at a time.
type slotMove struct {
	t        *testing.T
	slot     int
	from, to string                   // addresses of the source and the target
	admin    map[string]*redis.Client // a client of each master, by address
	ids      map[string]string        // the node id of each master
	moved    int                      // keys migrated so far
}

// startSlotMove opens the migration of key's hash slot from its master to
// another master of cl: SETSLOT IMPORTING on the target, then MIGRATING on
// the source. From then on the source answers ASK for the slot's keys it
// does not hold, and the target serves them to a client that sent ASKING
// first. It leaves c's map of slots as it was (it talks to each master
// through a client of its own).
func startSlotMove(t *testing.T, cl *redistest.Cluster, c *redis.ClusterClient, key string) *slotMove {
	t.Helper()
	ctx := context.Background()
	src, err := c.MasterForKey(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	m := &slotMove{t: t, slot: int(keys.Slot(key)), from: src.Options().Addr, admin: map[string]*redis.Client{}, ids: map[string]string{}}
	for _, n := range cl.Nodes() {
		a := n.Client(t)
		role, err := a.Do(ctx, "ROLE").Slice()
		if err != nil {
			t.Fatalf("ROLE on %s: %v", n.Addr(), err)
		}
		if role[0] != "master" {
			continue
		}
		id, err := a.Do(ctx, "CLUSTER", "MYID").Text()
		if err != nil {
			t.Fatal(err)
		}
		m.admin[n.Addr()], m.ids[n.Addr()] = a, id
	}
	for addr := range m.admin {
		if addr != m.from {
			m.to = addr
			break
		}
	}
	if m.admin[m.from] == nil || m.to == "" {
		t.Fatalf("masters %v: no source %s or no other master", m.ids, m.from)
	}
	m.do(m.to, "CLUSTER", "SETSLOT", m.slot, "IMPORTING", m.ids[m.from])
	m.do(m.from, "CLUSTER", "SETSLOT", m.slot, "MIGRATING", m.ids[m.to])
	return m
}

func (m *slotMove) do(addr string, args ...any) {
	m.t.Helper()
	if err := m.admin[addr].Do(context.Background(), args...).Err(); err != nil {
		m.t.Fatalf("%v on %s: %v", args, addr, err)
	}
}

// migrate moves ks, keys of the slot, from the source to the target in one
// MIGRATE (atomic on the source, as redis-cli's batches of
// --cluster-pipeline keys are).
func (m *slotMove) migrate(ks ...string) {
	m.t.Helper()
	host, port, _ := strings.Cut(m.to, ":")
	args := []any{"MIGRATE", host, port, "", 0, 5000, "KEYS"}
	for _, k := range ks {
		args = append(args, k)
	}
	if err := m.admin[m.from].Do(context.Background(), args...).Err(); err != nil {
		m.t.Fatalf("MIGRATE %v: %v", ks, err)
	}
	m.moved += len(ks)
}

// migrateRest migrates the keys of the slot still on the source and returns
// how many it moved.
func (m *slotMove) migrateRest() int {
	m.t.Helper()
	ks, err := m.admin[m.from].ClusterGetKeysInSlot(context.Background(), m.slot, 1000).Result()
	if err != nil {
		m.t.Fatalf("keys in slot %d: %v", m.slot, err)
	}
	if len(ks) > 0 {
		m.migrate(ks...)
	}
	return len(ks)
}

// finish ends the migration (call migrateRest first): SETSLOT NODE on every master.
func (m *slotMove) finish() {
	m.t.Helper()
	for addr := range m.admin {
		m.do(addr, "CLUSTER", "SETSLOT", m.slot, "NODE", m.ids[m.to])
	}
	m.t.Logf("slot %d (%d keys migrated) moved from %s to %s", m.slot, m.moved, m.from, m.to)
}
