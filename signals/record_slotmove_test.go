package signals_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/keys"
	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

// TestDoneRecordWrittenWhileItsSlotMoves: a run ends while the Cluster slot
// of its thread's done record migrates, with the record's keys split between
// the two masters (Redis answers TRYAGAIN to the record's compare-and-swap
// script until the move ends, as `redis-cli --cluster reshard` leaves a slot
// between its MIGRATE batches). The record write is tried again until the
// move ends: the signal is in the record afterwards, and a duplicate Send of
// it from a process that never saw it (no cache) is not run again. The
// signal's inbox entry stays unacked while the record cannot be written.
//
// Before, the write failed at its first TRYAGAIN ("signals: writing the done
// record failed"), the entry was acked all the same, and the record missed
// the signal: the duplicate Send ran it a second time
// (TestClusterReshardUnderLoad logged 4-20 such failures per resharding).
func TestDoneRecordWrittenWhileItsSlotMoves(t *testing.T) {
	const (
		prefix = "recmv"
		thread = "rec-thread"
		hold   = 800 * time.Millisecond // how long the record's keys stay split
	)
	cl := redistest.StartCluster(t, 3)
	space, err := keys.NewSpace(prefix)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cc := cl.Client(t)
	recKey := space.Lease(signals.RecordKey(thread))
	if a, b := cc.ClusterKeySlot(ctx, recKey).Val(), cc.ClusterKeySlot(ctx, space.Lease(signals.LeaseKey(thread))).Val(); a == b {
		t.Fatalf("the record and the thread's lease share slot %d: pick another thread name", a)
	}

	var (
		mu      sync.Mutex
		ran     = map[string]int{}
		started = make(chan string, 8)
		release = make(chan struct{})
	)
	agent := func(ctx context.Context, r *signals.Run) error {
		for _, s := range r.Signals {
			mu.Lock()
			ran[s.ID]++
			mu.Unlock()
			started <- s.ID
			if s.ID == "s2" {
				<-release
			}
		}
		return nil
	}
	newRuntime := func() (*redisstreams.Backend, *signals.Runtime) {
		b, err := redisstreams.New(cl.Client(t), redisstreams.Options{Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		rt, err := signals.New(b, agent, signals.WithLinger(100*time.Millisecond), signals.WithLeaseTTL(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		return b, rt
	}
	b, rt := newRuntime()
	defer b.Close()
	defer rt.Close(ctx)
	record := func() string {
		rec, err := b.GetLeaseOwner(ctx, signals.RecordKey(thread))
		if err != nil {
			t.Logf("read the record: %v", err)
		}
		return rec
	}
	send := func(rt *signals.Runtime, id string) {
		t.Helper()
		if _, err := rt.Send(ctx, thread, signals.Signal{ID: id, Type: "t"}); err != nil {
			t.Fatalf("Send %s: %v", id, err)
		}
	}
	inboxPending := func() int64 {
		gs, err := cc.XInfoGroups(ctx, space.Stream(signals.InboxTopic(thread))).Result()
		if err != nil && strings.Contains(err.Error(), "no such key") {
			return 0 // deleted once drained, as a tenure that ends does
		}
		if err != nil {
			t.Fatalf("XINFO GROUPS of the inbox: %v", err)
		}
		var n int64
		for _, g := range gs {
			n += g.Pending
		}
		return n
	}

	send(rt, "s1")
	<-started
	waitFor(t, 10*time.Second, "s1 in the done record", func() bool { return signals.RecordHas(record(), "s1") })
	send(rt, "s2")
	if id := <-started; id != "s2" {
		t.Fatalf("started %s, want s2", id)
	}

	// Split the record's keys: the record (the lease key) goes, its fencing
	// counter stays, so a script on both gets TRYAGAIN.
	m := cl.StartSlotMove(t, recKey)
	ks := m.Keys(100)
	if len(ks) < 2 {
		t.Fatalf("slot %d holds %v, want the record and its fencing counter", m.Slot, ks)
	}
	m.Migrate(recKey)
	close(release) // s2's run ends: its record write meets the split slot
	time.Sleep(hold)
	if n := inboxPending(); n != 1 {
		t.Errorf("inbox entries pending after %v of a split record slot: %d, want s2's (acked before its record was written)", hold, n)
	}
	for m.MigrateRest() > 0 {
	}
	m.Finish()

	waitFor(t, 15*time.Second, "s2 in the done record after the move", func() bool { return signals.RecordHas(record(), "s2") })
	waitFor(t, 15*time.Second, "s2's inbox entry acked", func() bool { return inboxPending() == 0 })

	// A process that never saw s2 is told by the record alone.
	b2, rt2 := newRuntime()
	defer b2.Close()
	defer rt2.Close(ctx)
	send(rt2, "s2")
	send(rt2, "s3")
	waitFor(t, 15*time.Second, "s3 ran", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return ran["s3"] == 1
	})
	mu.Lock()
	defer mu.Unlock()
	if ran["s1"] != 1 || ran["s2"] != 1 {
		t.Fatalf("runs per signal %v, want s1, s2 and s3 once each", ran)
	}
}
