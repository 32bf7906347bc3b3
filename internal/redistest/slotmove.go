package redistest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// SlotMove is a migration of one hash slot of a [Cluster] from its master
// to another master, run one step at a time as `redis-cli --cluster
// reshard` runs it: [Cluster.StartSlotMove] marks the slot IMPORTING on the
// target and MIGRATING on the source; [SlotMove.Migrate] moves keys of the
// slot (one MIGRATE per call, atomic on the source, as reshard's batches of
// --cluster-pipeline keys are); [SlotMove.Finish] assigns the slot to the
// target on every master (SETSLOT NODE). Between the first two steps and the
// last, the source answers ASK for the slot's keys it no longer holds, and a
// command with several keys of the slot, some moved and some not, fails
// with TRYAGAIN. It talks to each master through a client of its own, so a
// test's clients keep the map of slots they had. Its methods call t.Fatal:
// call them from the test's goroutine.
type SlotMove struct {
	t testing.TB
	// Slot is the hash slot being moved; From and To are the addresses of
	// its source and target masters.
	Slot     int
	From, To string
	admin    map[string]*redis.Client // a client of each master, by address
	ids      map[string]string        // the node id of each master
	order    []string                 // the masters' addresses
	moved    int                      // keys migrated so far
}

// StartSlotMove starts moving the hash slot of key from the master that
// holds it to another master (the first other one in [Cluster.Nodes]
// order), as [SlotMove] describes.
func (c *Cluster) StartSlotMove(t testing.TB, key string) *SlotMove {
	t.Helper()
	ctx := context.Background()
	m := &SlotMove{t: t, admin: map[string]*redis.Client{}, ids: map[string]string{}}
	var order []string
	for _, n := range c.nodes {
		a := n.Client(t)
		role, err := a.Do(ctx, "ROLE").Slice()
		if err != nil {
			t.Fatalf("redistest: ROLE on %s: %v", n.Addr(), err)
		}
		if role[0] != "master" {
			continue
		}
		id, err := a.Do(ctx, "CLUSTER", "MYID").Text()
		if err != nil {
			t.Fatalf("redistest: CLUSTER MYID on %s: %v", n.Addr(), err)
		}
		m.admin[n.Addr()], m.ids[n.Addr()] = a, id
		order = append(order, n.Addr())
	}
	m.order = order
	if len(order) < 2 {
		t.Fatalf("redistest: StartSlotMove: %d masters, want at least 2", len(order))
	}
	slot, err := m.admin[order[0]].ClusterKeySlot(ctx, key).Result()
	if err != nil {
		t.Fatalf("redistest: CLUSTER KEYSLOT %q: %v", key, err)
	}
	m.Slot = int(slot)
	slots, err := m.admin[order[0]].ClusterSlots(ctx).Result()
	if err != nil {
		t.Fatalf("redistest: CLUSTER SLOTS: %v", err)
	}
	for _, r := range slots {
		if int64(r.Start) <= slot && slot <= int64(r.End) && len(r.Nodes) > 0 {
			m.From = r.Nodes[0].Addr
		}
	}
	if m.admin[m.From] == nil {
		t.Fatalf("redistest: slot %d of %q: master %q is not one of %v", m.Slot, key, m.From, order)
	}
	for _, addr := range order {
		if addr != m.From {
			m.To = addr
			break
		}
	}
	m.do(m.To, "CLUSTER", "SETSLOT", m.Slot, "IMPORTING", m.ids[m.From])
	m.do(m.From, "CLUSTER", "SETSLOT", m.Slot, "MIGRATING", m.ids[m.To])
	return m
}

// Masters returns the addresses of the Cluster's masters, in
// [Cluster.Nodes] order.
func (m *SlotMove) Masters() []string { return append([]string(nil), m.order...) }

// Admin returns the move's own client of the master at addr (From, To or
// another master), or nil.
func (m *SlotMove) Admin(addr string) *redis.Client { return m.admin[addr] }

func (m *SlotMove) do(addr string, args ...any) {
	m.t.Helper()
	if err := m.admin[addr].Do(context.Background(), args...).Err(); err != nil {
		m.t.Fatalf("redistest: %v on %s: %v", args, addr, err)
	}
}

// Keys returns up to n keys of the slot still on the source.
func (m *SlotMove) Keys(n int) []string {
	m.t.Helper()
	ks, err := m.admin[m.From].ClusterGetKeysInSlot(context.Background(), m.Slot, n).Result()
	if err != nil {
		m.t.Fatalf("redistest: keys in slot %d: %v", m.Slot, err)
	}
	return ks
}

// Migrate moves ks, keys of the slot, from the source to the target in one
// MIGRATE.
func (m *SlotMove) Migrate(ks ...string) {
	m.t.Helper()
	host, port, _ := strings.Cut(m.To, ":")
	args := []any{"MIGRATE", host, port, "", 0, (5 * time.Second).Milliseconds(), "KEYS"}
	for _, k := range ks {
		args = append(args, k)
	}
	if err := m.admin[m.From].Do(context.Background(), args...).Err(); err != nil {
		m.t.Fatalf("redistest: MIGRATE %v: %v", ks, err)
	}
	m.moved += len(ks)
}

// MigrateRest migrates the keys of the slot still on the source (up to
// 1,000) and returns how many it moved.
func (m *SlotMove) MigrateRest() int {
	m.t.Helper()
	ks := m.Keys(1000)
	if len(ks) > 0 {
		m.Migrate(ks...)
	}
	return len(ks)
}

// Moved returns how many keys were migrated so far.
func (m *SlotMove) Moved() int { return m.moved }

// Finish ends the move (call MigrateRest first): SETSLOT NODE on every
// master.
func (m *SlotMove) Finish() {
	m.t.Helper()
	for addr := range m.admin {
		m.do(addr, "CLUSTER", "SETSLOT", m.Slot, "NODE", m.ids[m.To])
	}
}
