package redisstreams

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/keys"
	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// TestClusterReadersBoundedPerNode: on a 3-master Cluster, with a
// ClusterClient of go-redis's default options (a pool of 10 per GOMAXPROCS
// per node), 200 group subscriptions and 40 fan-out subscriptions on 200
// topics (about 200 hash slots, some 67 per node) get every event: each
// group event exactly once, each fan-out event once per subscription; the
// client's pool never times out, and each node holds at most clusterLanes
// (4) connections of the Backend blocked in a read (its node readers),
// however many slots it serves. Before the readers were per node (one per hash
// slot, each holding a pooled connection in a blocking XREAD), the pool ran
// dry: Subscribe failed or events stayed undelivered, with pool timeouts.
func TestClusterReadersBoundedPerNode(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	c := cl.Client(t) // go-redis's defaults, as a user builds it
	b := psBackend(t, c, Options{})
	ctx := context.Background()
	const topics, fanouts, rounds = 200, 40, 3
	topic := func(i int) string { return fmt.Sprint("nodes.t", i) }
	slots := map[uint16]bool{}
	for i := range topics {
		slots[keys.Slot(b.keys.Stream(topic(i)))] = true
	}
	var (
		mu    sync.Mutex
		group = map[string]int{} // event id → group deliveries
		fan   = map[string]int{} // event id → fan-out deliveries
		left  atomic.Int64       // deliveries still to come
	)
	left.Store(topics*rounds + fanouts*rounds)
	done := make(chan struct{})
	count := func(m map[string]int) pubsub.Handler {
		return func(_ context.Context, e pubsub.Event) error {
			mu.Lock()
			m[e.ID]++
			mu.Unlock()
			if left.Add(-1) == 0 {
				close(done)
			}
			return nil
		}
	}
	for i := range topics {
		if _, err := b.Subscribe(ctx, topic(i), count(group), pubsub.Group("g")); err != nil {
			t.Fatalf("group subscription %d: %v", i, err)
		}
		if i%(topics/fanouts) == 0 {
			if _, err := b.Subscribe(ctx, topic(i), count(fan)); err != nil {
				t.Fatalf("fan-out subscription %d: %v", i, err)
			}
		}
	}
	blocked := func() map[string]int {
		out := map[string]int{}
		for _, n := range cl.Nodes() {
			_, k, err := redistest.ClientStats(ctx, n.Client(t))
			if err != nil {
				t.Fatal(err)
			}
			out[n.Addr()] = k
		}
		return out
	}
	most := map[string]int{}
	note := func() {
		for addr, k := range blocked() {
			most[addr] = max(most[addr], k)
		}
	}
	for r := range rounds {
		for i := range topics {
			if err := b.Publish(ctx, topic(i), pubsub.Event{ID: fmt.Sprint(r, "-", i), Type: "x"}); err != nil {
				t.Fatalf("publish: %v", err)
			}
		}
		note()
	}
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Errorf("%d deliveries missing after 1m", left.Load())
	}
	note()
	timeouts := c.PoolStats().Timeouts
	t.Logf("%d topics in %d slots; most connections blocked in a read per node: %v; pool timeouts: %d", topics, len(slots), most, timeouts)
	if timeouts != 0 {
		t.Errorf("%d pool timeouts, want 0", timeouts)
	}
	for addr, k := range most {
		if k > clusterLanes {
			t.Errorf("node %s: %d connections blocked in reads, want at most %d (its node readers)", addr, k, clusterLanes)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for r := range rounds {
		for i := range topics {
			id := fmt.Sprint(r, "-", i)
			if group[id] != 1 {
				t.Errorf("event %s delivered %d times to the group, want 1", id, group[id])
			}
			want := 0
			if i%(topics/fanouts) == 0 {
				want = 1
			}
			if fan[id] != want {
				t.Errorf("event %s delivered %d times to fan-out subscriptions, want %d", id, fan[id], want)
			}
		}
	}
}

// TestClusterSharedNodeReaderLatency: on a 3-master Cluster a fan-out
// subscription and a group subscription on each of 30 topics (30 slots,
// 7 to 13 per master: on each, the first clusterLanes-1 slots get a node
// reader of their own, and the others share one, which polls them and
// blocks on one), one event at a time published to each topic in turn:
// every event reaches both subscriptions within a generous bound (1s; the
// poll interval is clusterPoll), whichever slot the shared node reader was
// blocked on. Then, in a second without events, each master gets at most
// 200 round trips (about 60 expected: a reader that spins would make
// thousands). The latencies (of the slots with a node reader of their own
// and of the shared ones apart) and round trips are logged (figures in
// BENCHMARKS.md).
func TestClusterSharedNodeReaderLatency(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	c := cl.Client(t)
	var hmu sync.Mutex
	trips := map[string]*redistest.RoundTrips{}
	c.OnNewNode(func(node *redis.Client) {
		h := &redistest.RoundTrips{}
		node.AddHook(h)
		hmu.Lock()
		trips[node.Options().Addr] = h
		hmu.Unlock()
	})
	b := psBackend(t, c, Options{})
	ctx := context.Background()
	const topics, rounds = 30, 4
	topic := func(i int) string { return fmt.Sprint("lat.t", i) }
	type arrival struct {
		id    string
		group bool
		at    time.Time
	}
	got := make(chan arrival, 64)
	for i := range topics {
		for _, group := range []bool{false, true} {
			var opts []pubsub.SubscribeOption
			if group {
				opts = append(opts, pubsub.Group("g"))
			}
			if _, err := b.Subscribe(ctx, topic(i), func(_ context.Context, e pubsub.Event) error {
				got <- arrival{e.ID, group, time.Now()}
				return nil
			}, opts...); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Every master has a node reader that serves several slots.
	perNode := map[string]int{}
	shared := map[int]bool{} // topic → its slot shares a node reader
	b.bus.mu.Lock()
	for i := range topics {
		r := b.bus.readers[b.bus.readerGroup(b.keys.Stream(topic(i)))]
		d := r.node.Load()
		perNode[d.node]++
		shared[i] = len(d.members) > 1
	}
	sharing := map[string]int{}
	for _, d := range b.bus.nodes {
		if len(d.members) > 1 {
			sharing[d.node] = len(d.members)
		}
	}
	b.bus.mu.Unlock()
	if len(perNode) != 3 || len(sharing) != 3 {
		t.Fatalf("slots per master %v, slots of a shared node reader per master %v: want 3 masters, each with a shared node reader; pick other topics", perNode, sharing)
	}
	// Let the group subscriptions hang their bells (their first read).
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	var lat, fanLat, groupLat, ownLat []time.Duration
	for r := range rounds {
		for i := range topics {
			id := fmt.Sprint(r, "-", i)
			sent := time.Now()
			if err := b.Publish(ctx, topic(i), pubsub.Event{ID: id, Type: "x"}); err != nil {
				t.Fatal(err)
			}
			for seen := map[bool]bool{}; len(seen) < 2; {
				select {
				case a := <-got:
					if a.id != id || seen[a.group] {
						t.Fatalf("got %s (group %v) while waiting for %s", a.id, a.group, id)
					}
					seen[a.group] = true
					lat = append(lat, a.at.Sub(sent))
					switch {
					case !shared[i]:
						ownLat = append(ownLat, a.at.Sub(sent))
					case a.group:
						groupLat = append(groupLat, a.at.Sub(sent))
					default:
						fanLat = append(fanLat, a.at.Sub(sent))
					}
				case <-time.After(10 * time.Second):
					t.Fatalf("event %s not delivered to both subscriptions within 10s", id)
				}
			}
		}
	}
	q := func(l []time.Duration, p float64) time.Duration {
		slices.Sort(l)
		return l[int(p*float64(len(l)-1))].Round(100 * time.Microsecond)
	}
	t.Logf("%d topics (%v per master, %v on the shared node reader), one event at a time: shared slots: fan-out p50 %v, p90 %v, max %v; group p50 %v, p90 %v, max %v; slots with a node reader of their own, both kinds: p50 %v, p90 %v, max %v",
		topics, perNode, sharing, q(fanLat, 0.5), q(fanLat, 0.9), q(fanLat, 1), q(groupLat, 0.5), q(groupLat, 0.9), q(groupLat, 1),
		q(ownLat, 0.5), q(ownLat, 0.9), q(ownLat, 1))
	if worst := lat[len(lat)-1]; worst > time.Second {
		t.Fatalf("slowest delivery %v, want within 1s", worst)
	}

	// What the polling costs an idle node: round trips per node in a
	// second without events (the poll pipeline, the blocking read and its
	// CLIENT UNBLOCK, 3 per clusterPoll, plus the group subscriptions'
	// BlockTime safety reads and the acker). A generous bound catches a
	// reader that spins.
	hmu.Lock()
	for _, h := range trips {
		h.Reset()
	}
	hmu.Unlock()
	const window = time.Second
	time.Sleep(window) // a measurement window, not a wait for a condition
	hmu.Lock()
	defer hmu.Unlock()
	idle := map[string]int64{}
	for addr, h := range trips {
		idle[addr] = h.N()
	}
	t.Logf("round trips per node in %v without events: %v", window, idle)
	for addr, n := range idle {
		if n > 200 {
			t.Errorf("node %s: %d round trips in %v without events, want at most 200", addr, n, window)
		}
	}
}

// TestClusterReaderFollowsSlotMigration: a fan-out and a group subscription
// on a topic whose hash slot is migrated to another master (CLUSTER SETSLOT
// IMPORTING/MIGRATING, MIGRATE, SETSLOT NODE on every node), while a second
// topic keeps a node reader of the old master serving a slot: the slot's
// reader is handed to a node reader of the new master, every event
// published before and after the migration is delivered once to each
// subscription, and no node holds more than clusterLanes connections of
// the Backend blocked in a read.
func TestClusterReaderFollowsSlotMigration(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	c := cl.Client(t)
	b := psBackend(t, c, Options{})
	ctx := context.Background()
	nodeOf := func(topic string) string {
		n, err := c.MasterForKey(ctx, b.keys.Stream(topic))
		if err != nil {
			t.Fatal(err)
		}
		return n.Options().Addr
	}
	const moving = "mig.a"
	src := nodeOf(moving)
	stay := "" // another topic on the same master, in another slot
	for i := 0; stay == ""; i++ {
		if tp := fmt.Sprint("mig.b", i); nodeOf(tp) == src && keys.Slot(b.keys.Stream(tp)) != keys.Slot(b.keys.Stream(moving)) {
			stay = tp
		}
	}
	var mu sync.Mutex
	got := map[string]int{} // "fan/"+id or "group/"+id → deliveries
	arrived := make(chan struct{}, 64)
	handler := func(kind string) pubsub.Handler {
		return func(_ context.Context, e pubsub.Event) error {
			mu.Lock()
			got[kind+"/"+e.ID]++
			mu.Unlock()
			arrived <- struct{}{}
			return nil
		}
	}
	for _, tp := range []string{moving, stay} {
		if _, err := b.Subscribe(ctx, tp, handler("fan")); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Subscribe(ctx, tp, handler("group"), pubsub.Group("g")); err != nil {
			t.Fatal(err)
		}
	}
	want := 0
	publish := func(tp, id string) {
		t.Helper()
		if err := b.Publish(ctx, tp, pubsub.Event{ID: id, Type: "x"}); err != nil {
			t.Fatal(err)
		}
		want += 2
	}
	wait := func() {
		t.Helper()
		deadline := time.After(30 * time.Second)
		for {
			mu.Lock()
			n := 0
			for _, k := range got {
				n += k
			}
			mu.Unlock()
			if n >= want {
				return
			}
			select {
			case <-arrived:
			case <-deadline:
				t.Fatalf("%d of %d deliveries within 30s: %v", n, want, got)
			}
		}
	}
	publish(moving, "before")
	publish(stay, "stay-before")
	wait()

	// Migrate the slot of moving from src to another master.
	mig := newSlotMigration(t, cl, b, moving, src)
	n := mig.begin()
	mig.finish()
	slot, dst := mig.slot, mig.dst
	t.Logf("slot %d (%d keys) moved from %s to %s", slot, n, src, dst)

	for i := range 5 {
		publish(moving, fmt.Sprint("after-", i))
		publish(stay, fmt.Sprint("stay-after-", i))
	}
	wait()
	b.bus.mu.Lock()
	r := b.bus.readers[fmt.Sprint("slot:", slot)]
	b.bus.mu.Unlock()
	if r == nil {
		t.Fatal("no reader for the migrated slot")
	}
	if at := r.node.Load().node; at != dst {
		t.Errorf("the migrated slot's reader is read by the node reader of %s, want %s", at, dst)
	}
	for addr, a := range mig.admin {
		_, k, err := redistest.ClientStats(ctx, a)
		if err != nil {
			t.Fatal(err)
		}
		if k > clusterLanes {
			t.Errorf("node %s: %d connections blocked in reads, want at most %d", addr, k, clusterLanes)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for key, n := range got {
		if n != 1 {
			t.Errorf("%s delivered %d times, want once", key, n)
		}
	}
	if len(got) != want {
		t.Errorf("%d distinct deliveries, want %d: %v", len(got), want, got)
	}
}

// TestClusterFewSlotsPerMasterBlockAlone: the signals runtime's topics
// ("signals.work", read by a group subscription and a fan-out one, and
// "signals.control", fan-out) lie in two slots of one master of a 3-master
// Cluster. Each gets a node reader of its own (fewer than clusterLanes
// slots on the master), which blocks on it for BlockTime as on a
// standalone client instead of polling: that master holds two connections
// of the Backend blocked in a read, and an event on either topic is
// delivered without waiting for a poll.
func TestClusterFewSlotsPerMasterBlockAlone(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	c := cl.Client(t)
	b := psBackend(t, c, Options{})
	ctx := context.Background()
	topics := []string{"signals.work", "signals.control"}
	var addrs []string
	for _, tp := range topics {
		n, err := c.MasterForKey(ctx, b.keys.Stream(tp))
		if err != nil {
			t.Fatal(err)
		}
		addrs = append(addrs, n.Options().Addr)
	}
	if addrs[0] != addrs[1] {
		t.Fatalf("the topics are on masters %v: the test needs them on one", addrs)
	}
	got := make(chan string, 8)
	h := func(_ context.Context, e pubsub.Event) error {
		got <- e.ID
		return nil
	}
	if _, err := b.Subscribe(ctx, topics[0], h, pubsub.Group("g")); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Subscribe(ctx, topics[0], func(context.Context, pubsub.Event) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Subscribe(ctx, topics[1], h); err != nil {
		t.Fatal(err)
	}
	b.bus.mu.Lock()
	for _, tp := range topics {
		d := b.bus.readers[b.bus.readerGroup(b.keys.Stream(tp))].node.Load()
		if len(d.members) != 1 {
			t.Errorf("the reader of %q shares its node reader with %d others", tp, len(d.members)-1)
		}
	}
	b.bus.mu.Unlock()
	var admin *redis.Client
	for _, n := range cl.Nodes() {
		if n.Addr() == addrs[0] {
			admin = n.Client(t)
		}
	}
	var lat []time.Duration
	for i := range 20 {
		tp := topics[i%2]
		id := fmt.Sprint(i)
		sent := time.Now()
		if err := b.Publish(ctx, tp, pubsub.Event{ID: id, Type: "x"}); err != nil {
			t.Fatal(err)
		}
		select {
		case g := <-got:
			if g != id {
				t.Fatalf("got %s, want %s", g, id)
			}
			lat = append(lat, time.Since(sent))
		case <-time.After(10 * time.Second):
			t.Fatalf("event %s on %s not delivered within 10s", id, tp)
		}
	}
	// Both readers block again once their last read is handed over.
	blocked := 0
	for deadline := time.Now().Add(5 * time.Second); blocked < 2 && time.Now().Before(deadline); {
		var err error
		if _, blocked, err = redistest.ClientStats(ctx, admin); err != nil {
			t.Fatal(err)
		}
		if blocked < 2 {
			time.Sleep(10 * time.Millisecond)
		}
	}
	slices.Sort(lat)
	t.Logf("master %s: %d connections blocked in a read; delivery p50 %v, max %v", addrs[0], blocked, lat[len(lat)/2], lat[len(lat)-1])
	if blocked != 2 {
		t.Errorf("%d connections blocked in a read on the master, want 2 (a node reader per slot)", blocked)
	}
}

// slotMigration moves the hash slot of a topic's stream from the master src
// to another master, as redis-cli --cluster reshard does
// (redistest.SlotMove): begin marks the slot IMPORTING on the target and
// MIGRATING on the source and MIGRATEs its keys; finish assigns it to the
// target on every node (SETSLOT NODE). After begin, slot and dst name the
// slot and the target, and admin holds a client of each master.
type slotMigration struct {
	t        *testing.T
	cl       *redistest.Cluster
	key, src string
	slot     int
	dst      string
	admin    map[string]*redis.Client // node address -> a client of that master
	m        *redistest.SlotMove
}

func newSlotMigration(t *testing.T, cl *redistest.Cluster, b *Backend, topic, src string) *slotMigration {
	return &slotMigration{t: t, cl: cl, key: b.keys.Stream(topic), src: src}
}

// begin starts the migration and moves the slot's keys; it returns how
// many there were.
func (m *slotMigration) begin() int {
	m.t.Helper()
	m.m = m.cl.StartSlotMove(m.t, m.key)
	if m.m.From != m.src {
		m.t.Fatalf("slot %d is on %s, want %s", m.m.Slot, m.m.From, m.src)
	}
	m.slot, m.dst = m.m.Slot, m.m.To
	m.admin = map[string]*redis.Client{}
	for _, addr := range m.m.Masters() {
		m.admin[addr] = m.m.Admin(addr)
	}
	n := m.m.MigrateRest()
	if n == 0 {
		m.t.Fatalf("no keys in slot %d", m.slot)
	}
	return n
}

// finish assigns the slot to the target on every node.
func (m *slotMigration) finish() {
	m.t.Helper()
	m.m.Finish()
}
