package inmem

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/pubsub"
)

func TestOptionsRejected(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    Options
		want string
	}{
		{"RetentionBelowRetainAll", Options{Retention: -2}, "Retention -2"},
		{"TopicIdleTTLNegative", Options{TopicIdleTTL: -time.Second}, "TopicIdleTTL -1s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := NewWithOptions(tc.o)
			if err == nil {
				b.Close()
				t.Fatalf("NewWithOptions(%+v) accepted, want an error naming %q", tc.o, tc.want)
			}
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want ErrInvalid naming %q", err, tc.want)
			}
		})
	}
	b, err := NewWithOptions(Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.opts.Retention != pubsub.DefaultRetention || b.opts.TopicIdleTTL != DefaultTopicIdleTTL {
		t.Fatalf("defaults %+v, want Retention %d, TopicIdleTTL %v", b.opts, pubsub.DefaultRetention, DefaultTopicIdleTTL)
	}
}

// heapAfterGC returns the live heap after two collections.
func heapAfterGC() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// heapBound is how far above its starting level the heap may stay once
// everything the test used was abandoned and swept.
const heapBound = 256 << 10

// TestAbandonedTopicsAreForgotten uses 10,000 topics, each with a group
// whose member reads 3 events and leaves, and 10,000 lease keys acquired and
// released; after TopicIdleTTL (on a ManualClock) one sweep forgets them
// all, and the heap after GC is back within heapBound of where it started.
func TestAbandonedTopicsAreForgotten(t *testing.T) {
	const topics = 10_000
	clock := NewManualClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	b, err := NewWithOptions(Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	data := []byte(`"` + strings.Repeat("x", 200) + `"`)
	use := func(i int) {
		topic := fmt.Sprintf("abandoned-%d", i)
		got := make(chan struct{}, 3)
		sub := mustSubscribe(t, b, topic, func(context.Context, pubsub.Event) error { got <- struct{}{}; return nil },
			pubsub.Group("g"), pubsub.StartFrom(pubsub.Earliest))
		for range 3 {
			mustPublish(t, b, topic, pubsub.Event{Type: "e", Data: data})
		}
		for range 3 {
			waitFor(t, got, "a delivery")
		}
		if err := sub.Unsubscribe(ctx); err != nil {
			t.Fatal(err)
		}
		key := fmt.Sprintf("lease-%d", i)
		if r, err := b.AcquireLease(ctx, key, "o", time.Minute); err != nil || !r.Acquired {
			t.Fatalf("acquire %s: %+v, %v", key, r, err)
		}
		if err := b.ReleaseLease(ctx, key, "o"); err != nil {
			t.Fatal(err)
		}
	}
	// One round first, so that what is allocated once (pools, timers) is
	// in the starting level.
	use(-1)
	clock.Advance(DefaultTopicIdleTTL + sweepEvery)
	mustPublish(t, b, "sweeper", pubsub.Event{Type: "e"})
	start := heapAfterGC()

	for i := range topics {
		use(i)
	}
	r0, err := b.AcquireLease(ctx, "lease-0", "o", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	used := heapAfterGC()
	b.bus.mu.Lock()
	inUse := len(b.bus.topics)
	b.bus.mu.Unlock()
	if inUse < topics {
		t.Fatalf("%d topics kept before the idle time, want at least %d", inUse, topics)
	}

	clock.Advance(DefaultTopicIdleTTL + sweepEvery)
	mustPublish(t, b, "sweeper", pubsub.Event{Type: "e"}) // sweeps topics
	if err := b.ReleaseLease(ctx, "lease-0", "o"); err != nil {
		t.Fatal(err)
	}
	r1, err := b.AcquireLease(ctx, "lease-0", "o2", time.Minute) // sweeps leases
	if err != nil || !r1.Acquired {
		t.Fatalf("acquire after the sweep: %+v, %v", r1, err)
	}
	if r1.Token <= r0.Token {
		t.Fatalf("token after every lease was forgotten = %d, want > %d", r1.Token, r0.Token)
	}
	if err := b.ReleaseLease(ctx, "lease-0", "o2"); err != nil {
		t.Fatal(err)
	}
	end := heapAfterGC()

	b.bus.mu.Lock()
	kept := len(b.bus.topics)
	b.bus.mu.Unlock()
	b.leases.mu.Lock()
	leases := len(b.leases.live)
	b.leases.mu.Unlock()
	t.Logf("heap: start %d KiB, with %d topics in use %d KiB, after the sweep %d KiB; topics kept %d, leases kept %d",
		start>>10, topics, used>>10, end>>10, kept, leases)
	if kept != 1 {
		t.Errorf("%d topics kept after the idle time, want 1 (the sweeper)", kept)
	}
	if leases != 0 {
		t.Errorf("%d leases kept after release, want 0", leases)
	}
	if end > start+heapBound {
		t.Errorf("heap after the sweep %d KiB, want within %d KiB of the start %d KiB", end>>10, heapBound>>10, start>>10)
	}
	if used < start+4*heapBound {
		t.Errorf("heap with %d topics in use %d KiB, barely above the start %d KiB: the test measures nothing", topics, used>>10, start>>10)
	}
}

// TestIdleGroupForgottenOnlyWhenCaughtUp: a group without members is
// forgotten after TopicIdleTTL only when it has nothing left to deliver; a
// group with unread events keeps them (and its topic) however long it waits.
func TestIdleGroupForgottenOnlyWhenCaughtUp(t *testing.T) {
	clock := NewManualClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	b, err := NewWithOptions(Options{Clock: clock, Retention: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	nop := func(context.Context, pubsub.Event) error { return nil }
	for _, topic := range []string{"caught-up", "behind"} {
		sub := mustSubscribe(t, b, topic, nop, pubsub.Group("g"))
		mustPublish(t, b, topic, pubsub.Event{Type: "e"})
		mustFlush(t, b)
		if err := sub.Unsubscribe(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for range 100 {
		mustPublish(t, b, "behind", pubsub.Event{Type: "e"}) // unread by g
	}
	clock.Advance(2 * (DefaultTopicIdleTTL + sweepEvery))
	mustPublish(t, b, "sweeper", pubsub.Event{Type: "e"})
	if _, ok := retained(b, "caught-up"); ok {
		t.Error("topic whose only group had read and acked everything is still kept after the idle time")
	}
	n, ok := retained(b, "behind")
	if !ok || n < 100 {
		t.Fatalf("topic with a group behind: kept %v with %d events, want its 100 unread events", ok, n)
	}
	got := make(chan struct{}, 100)
	mustSubscribe(t, b, "behind", func(context.Context, pubsub.Event) error { got <- struct{}{}; return nil }, pubsub.Group("g"))
	for range 100 {
		waitFor(t, got, "an unread event of the idle group")
	}
}

// TestLeaseMarksGoAway: inmem/doc.go says a released or revoked lease
// leaves a mark of how it ended, which the sweep a new tenure runs (at
// most once a minute) drops once it is older than lease.StatusWindow.
// 1,000 leases released and 1,000 revoked leave 2,000 marks; a tenure
// after the window leaves its own alone.
func TestLeaseMarksGoAway(t *testing.T) {
	clock := NewManualClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	b, err := NewWithOptions(Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	for i := range 2000 {
		key := fmt.Sprint("k", i)
		if _, err := b.AcquireLease(ctx, key, "o", time.Minute); err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			err = b.ReleaseLease(ctx, key, "o")
		} else {
			err = b.RevokeLease(ctx, key, "test")
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	marks := func() int {
		b.leases.mu.Lock()
		defer b.leases.mu.Unlock()
		return len(b.leases.marks)
	}
	if n := marks(); n != 2000 {
		t.Fatalf("%d marks after 2,000 ended leases, want 2,000", n)
	}
	clock.Advance(lease.StatusWindow + 2*time.Minute)
	if _, err := b.AcquireLease(ctx, "new", "o", time.Minute); err != nil {
		t.Fatal(err)
	}
	if n := marks(); n != 1 {
		t.Fatalf("%d marks after the window and a new tenure's sweep, want 1 (the new tenure's)", n)
	}
}
