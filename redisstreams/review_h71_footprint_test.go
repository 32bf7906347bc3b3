package redisstreams

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/pubsub"
)

// busMaps is the size of every in-process table of a Backend's streamBus
// that can grow with topics or subscriptions (review h71).
type busMaps struct {
	subs, readers, nodes, subKeys, lastPub, goneTo, goneSeq int
	ackLanes, ackHeld, pubLanes, readLanes, masterPasses    int
}

func (m busMaps) zero() bool { return m == busMaps{} }

func busMapsOf(b *Backend) busMaps {
	s := &b.bus
	var m busMaps
	s.mu.Lock()
	m.subs, m.readers, m.nodes = len(s.subs), len(s.readers), len(s.nodes)
	s.mu.Unlock()
	s.fmu.Lock()
	m.subKeys, m.lastPub, m.goneTo, m.goneSeq = len(s.subKeys), len(s.lastPub), len(s.goneTo), len(s.goneSeq)
	s.fmu.Unlock()
	s.acks.mu.Lock()
	m.ackLanes, m.ackHeld = len(s.acks.lanes), len(s.acks.held)
	s.acks.mu.Unlock()
	m.pubLanes, m.readLanes = s.pubQ.count(), s.readQ.count()
	s.pmu.RLock()
	m.masterPasses = len(s.masterPasses)
	s.pmu.RUnlock()
	return m
}

// keyState is one key under a prefix: its type and its PTTL (-1: none).
type keyState struct {
	key, typ string
	pttl     time.Duration
}

// scanAll returns every key matching pattern, with its type and PTTL, by SCAN.
func scanAll(t *testing.T, c redis.UniversalClient, pattern string) []keyState {
	t.Helper()
	ctx := context.Background()
	var out []keyState
	iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		typ, err := c.Type(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if typ == "none" {
			continue // expired between SCAN and TYPE
		}
		ms, err := c.PTTL(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, keyState{k, typ, ms})
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(out, func(a, b keyState) int { return strings.Compare(a.key, b.key) })
	return out
}

// TestReviewH71BackendFootprint (review h71): a long-lived Backend on a
// NewURL client (default pool) sees many distinct topics come and go, in a
// mix of what users do: group subscriptions with pubsub.ExpireWhenDrained,
// some of whose events are dead-lettered (MaxDeliveries), fan-out
// subscriptions, plain group subscriptions whose topics are deleted
// (DeleteTopic) or left, and nacked entries handed back on Unsubscribe and
// taken over by a later member. Beside it, a member of another process is
// cut off for good (its Backend's client behind a proxy that refuses and
// cuts every connection: a process that died without its cleanup) while it
// holds entries of ExpireWhenDrained topics that a live member shares.
//
// Once the documented lifetimes passed, the test lists every key under the
// prefix (SCAN, TYPE, PTTL), every group and consumer of every stream left
// (XINFO GROUPS/CONSUMERS), and the Backend's in-process tables, and
// requires:
//
//   - of every ExpireWhenDrained topic, nothing: its stream expired;
//   - of every deleted topic, nothing;
//   - of every plain group topic left, its stream with its group and no
//     consumer (its members' consumers went as they unsubscribed);
//   - the hand-back notices gone (their entries were taken over);
//   - the dead member's read guards, each expiring within readGuardTTL;
//   - the dead-letter topics of the ExpireWhenDrained topics: streams
//     without an expiry (see the last check);
//   - in process: no subscription, reader, Flush mark, ack lane or held ack
//     left; goroutines back to where they were.
func TestReviewH71BackendFootprint(t *testing.T) {
	redistest.Require(t)
	n := 1000
	if testing.Short() {
		n = 250
	}
	if v := os.Getenv("LEASEBUS_H71_TOPICS"); v != "" {
		n, _ = strconv.Atoi(v)
	}
	srv := redistest.Start(t, redistest.Options{})
	c := srv.Client(t)
	ctx := context.Background()
	const (
		prefix  = "h71"
		drainTT = 300 * time.Millisecond
	)
	quiet := slog.New(slog.DiscardHandler)
	baseG := runtime.NumGoroutine()
	a, err := NewURL(ctx, srv.URL(), Options{Prefix: prefix, BlockTime: 100 * time.Millisecond, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })

	// The dead member's process: a Backend behind a proxy.
	proxy := redistest.NewProxy(t, srv.Addr())
	k, err := NewURL(ctx, "redis://"+proxy.Addr(), Options{Prefix: prefix, BlockTime: 100 * time.Millisecond, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.Close() })
	const shared = 10
	release := make(chan struct{})
	var releaseOnce sync.Once
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) }) // before k.Close (cleanups run last first)
	var kHeld atomic.Int64
	var kSubs []pubsub.Subscription
	var kGuards []string
	for i := range shared {
		topic := fmt.Sprint("shared", i)
		sub, err := k.Subscribe(ctx, topic, func(ctx context.Context, ev pubsub.Event) error {
			kHeld.Add(1)
			<-release
			return nil
		}, pubsub.Group("g"), pubsub.ExpireWhenDrained(drainTT), pubsub.AckDeadline(time.Second), pubsub.Concurrency(2))
		if err != nil {
			t.Fatal(err)
		}
		kSubs = append(kSubs, sub)
		kGuards = append(kGuards, sub.(*groupSub).guard)
	}
	// K, the only member yet, takes them all (two at a time in its
	// hanging handlers, the rest read ahead); then a live member joins,
	// and K's process dies.
	for i := range shared {
		for j := range 4 {
			if err := a.PublishFor(ctx, fmt.Sprint("shared", i), "g", pubsub.Event{ID: fmt.Sprint("s", i, "-", j), Type: "t"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for deadline := time.Now().Add(20 * time.Second); kHeld.Load() < 2*shared; {
		if time.Now().After(deadline) {
			t.Fatalf("the member to kill holds %d entries in its handlers after 20s, want %d", kHeld.Load(), 2*shared)
		}
		time.Sleep(10 * time.Millisecond)
	}
	var sharedRan atomic.Int64
	var aShared []pubsub.Subscription
	for i := range shared {
		topic := fmt.Sprint("shared", i)
		sub, err := a.Subscribe(ctx, topic, func(ctx context.Context, ev pubsub.Event) error {
			sharedRan.Add(1)
			return nil
		}, pubsub.Group("g"), pubsub.ExpireWhenDrained(drainTT), pubsub.AckDeadline(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		aShared = append(aShared, sub)
	}
	proxy.SetRefuse(true)
	proxy.CutAll()
	sctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_ = k.Shutdown(sctx) // gives up on the hung handlers: nothing acked, nothing cleaned up
	cancel()
	releaseOnce.Do(func() { close(release) })
	_ = kSubs

	// The churn of distinct topics on the live Backend.
	const (
		kindDrained   = iota // ExpireWhenDrained, acked
		kindDead             // ExpireWhenDrained, one event dead-lettered
		kindFanDelete        // fan-out, then DeleteTopic
		kindGroupDel         // group, then DeleteTopic
		kindGroupLeft        // group, topic left
		kindHandBack         // group, nacked entry handed back, taken over by a later member
		kinds
	)
	topicOf := func(i int) string { return fmt.Sprintf("t%d-%d", i%kinds, i) }
	one := func(i int) error {
		topic := topicOf(i)
		got := make(chan string, 16)
		var sub pubsub.Subscription
		var err error
		switch i % kinds {
		case kindDrained, kindDead:
			sub, err = a.Subscribe(ctx, topic, func(ctx context.Context, ev pubsub.Event) error {
				got <- ev.ID
				if ev.ID == "bad" {
					return errors.New("bad")
				}
				return nil
			}, pubsub.Group("own"), pubsub.ExpireWhenDrained(drainTT), pubsub.MaxDeliveries(1))
			if err != nil {
				return err
			}
			ids := []string{"e1", "e2"}
			if i%kinds == kindDead {
				ids = append(ids, "bad")
			}
			for _, id := range ids {
				if err := a.PublishFor(ctx, topic, "own", pubsub.Event{ID: id, Type: "t"}); err != nil {
					return err
				}
			}
			for range ids {
				select {
				case <-got:
				case <-time.After(20 * time.Second):
					return fmt.Errorf("%s: not delivered", topic)
				}
			}
			if i%kinds == kindDead {
				// "bad" was given to its handler; its dead-lettering comes
				// after the handler returns. An Unsubscribe before that
				// hands it back instead (the policy sees the ctx ended,
				// as documented), leaving the stream and a hand-back
				// notice: wait until the group holds nothing.
				for deadline := time.Now().Add(20 * time.Second); ; {
					bl, err := a.GroupBacklog(ctx, topic, "own")
					if err != nil {
						return err
					}
					if bl.Pending == 0 && bl.Lag == 0 {
						break
					}
					if time.Now().After(deadline) {
						return fmt.Errorf("%s: dead letter not settled within 20s: %+v", topic, bl)
					}
					time.Sleep(5 * time.Millisecond)
				}
			}
			return sub.Unsubscribe(ctx) // writes its acks first
		case kindFanDelete:
			sub, err = a.Subscribe(ctx, topic, func(ctx context.Context, ev pubsub.Event) error { got <- ev.ID; return nil })
			if err != nil {
				return err
			}
			for j := range 2 {
				if err := a.Publish(ctx, topic, pubsub.Event{ID: fmt.Sprint(j), Type: "t"}); err != nil {
					return err
				}
			}
			for range 2 {
				select {
				case <-got:
				case <-time.After(20 * time.Second):
					return fmt.Errorf("%s: not delivered", topic)
				}
			}
			if err := sub.Unsubscribe(ctx); err != nil {
				return err
			}
			return a.DeleteTopic(ctx, topic)
		case kindGroupDel, kindGroupLeft:
			sub, err = a.Subscribe(ctx, topic, func(ctx context.Context, ev pubsub.Event) error { got <- ev.ID; return nil }, pubsub.Group("g"))
			if err != nil {
				return err
			}
			for j := range 2 {
				if err := a.Publish(ctx, topic, pubsub.Event{ID: fmt.Sprint(j), Type: "t"}); err != nil {
					return err
				}
			}
			for range 2 {
				select {
				case <-got:
				case <-time.After(20 * time.Second):
					return fmt.Errorf("%s: not delivered", topic)
				}
			}
			if err := sub.Unsubscribe(ctx); err != nil {
				return err
			}
			if i%kinds == kindGroupDel {
				return a.DeleteTopic(ctx, topic)
			}
			return nil
		case kindHandBack:
			var first atomic.Bool
			sub, err = a.Subscribe(ctx, topic, func(ctx context.Context, ev pubsub.Event) error {
				got <- ev.ID
				if first.CompareAndSwap(false, true) {
					return errors.New("nack")
				}
				return nil
			}, pubsub.Group("g"), pubsub.RedeliveryDelay(time.Minute), pubsub.Concurrency(2))
			if err != nil {
				return err
			}
			if err := a.Publish(ctx, topic, pubsub.Event{ID: "h", Type: "t"}); err != nil {
				return err
			}
			select {
			case <-got:
			case <-time.After(20 * time.Second):
				return fmt.Errorf("%s: not delivered", topic)
			}
			if err := sub.Unsubscribe(ctx); err != nil { // hands the nacked entry back
				return err
			}
			// A later member (a new consumer) takes it over.
			sub2, err := a.Subscribe(ctx, topic, func(ctx context.Context, ev pubsub.Event) error { got <- ev.ID; return nil }, pubsub.Group("g"))
			if err != nil {
				return err
			}
			select {
			case <-got:
			case <-time.After(20 * time.Second):
				return fmt.Errorf("%s: handed-back entry not taken over", topic)
			}
			return sub2.Unsubscribe(ctx)
		}
		return nil
	}
	start := time.Now()
	var g errgroup.Group
	g.SetLimit(16)
	for i := range n {
		g.Go(func() error { return one(i) })
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d topics in %v", n, time.Since(start).Round(time.Millisecond))

	// The live member took over what the dead one held and drained them.
	for deadline := time.Now().Add(20 * time.Second); sharedRan.Load() < int64(shared*4); {
		if time.Now().After(deadline) {
			t.Fatalf("the live member ran %d of %d shared entries within 20s", sharedRan.Load(), shared*4)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, sub := range aShared {
		if err := sub.Unsubscribe(ctx); err != nil {
			t.Fatal(err)
		}
	}

	// The lifetimes: drainTT for the drained streams, ackLaneIdle for the
	// lanes. (readGuardTTL, 10 minutes, is checked as a bound.)
	var keys []keyState
	deadMarks := 0
	for deadline := time.Now().Add(20 * time.Second); ; {
		keys = scanAll(t, c, prefix+":*")
		var bad []string
		deadMarks = 0
		for _, ks := range keys {
			topic, isStream := a.keys.ParseStream(ks.key)
			switch {
			case slices.Contains(kGuards, ks.key):
				if ks.pttl <= 0 || ks.pttl > readGuardTTL {
					bad = append(bad, fmt.Sprintf("%s (dead member's read guard, PTTL %v)", ks.key, ks.pttl))
				}
			case isStream && ks.typ == "stream" && (strings.HasPrefix(topic, fmt.Sprintf("t%d-", kindGroupLeft)) || strings.HasPrefix(topic, fmt.Sprintf("t%d-", kindHandBack))):
				if ks.pttl != -1 {
					bad = append(bad, fmt.Sprintf("%s (left topic with PTTL %v)", ks.key, ks.pttl))
				}
			case isStream && ks.typ == "stream" && strings.HasPrefix(topic, fmt.Sprintf("t%d-", kindDead)) && strings.HasSuffix(topic, ".dead"):
				deadMarks++
				if ks.pttl != -1 {
					bad = append(bad, fmt.Sprintf("%s (dead-letter topic with PTTL %v)", ks.key, ks.pttl))
				}
			default:
				bad = append(bad, fmt.Sprintf("%s (%s, PTTL %v)", ks.key, ks.typ, ks.pttl))
			}
		}
		if len(bad) == 0 && busMapsOf(a).zero() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("20s after the churn: %d unexpected keys, e.g. %q; in-process tables %+v", len(bad), bad[:min(len(bad), 10)], busMapsOf(a))
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Every stream left: its groups and consumers.
	streams := 0
	for _, ks := range keys {
		if ks.typ != "stream" {
			continue
		}
		streams++
		groups, err := c.XInfoGroups(ctx, ks.key).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, gr := range groups {
			if gr.Consumers != 0 || gr.Pending != 0 {
				cs, _ := c.XInfoConsumers(ctx, ks.key, gr.Name).Result()
				t.Errorf("%s group %s: %d consumers, %d pending, want none: %+v", ks.key, gr.Name, gr.Consumers, gr.Pending, cs)
			}
		}
	}
	wantLeft, wantDead := 0, 0
	for i := range n {
		switch i % kinds {
		case kindGroupLeft, kindHandBack:
			wantLeft++
		case kindDead:
			wantDead++
		}
	}
	if deadMarks != wantDead {
		t.Errorf("%d dead-letter topics left, want %d", deadMarks, wantDead)
	}
	if streams != wantLeft+wantDead {
		t.Errorf("%d streams left, want %d left topics and %d dead-letter topics", streams, wantLeft, wantDead)
	}
	t.Logf("left: %d keys: %d streams (%d topics left as they were, %d dead-letter topics of ExpireWhenDrained topics, none with an expiry), %d read guards of the dead member (expiring within %v)",
		len(keys), streams, wantLeft, deadMarks, len(kGuards), readGuardTTL)

	// Goroutines: the dead member's Backend is shut down; the live one has
	// no subscription. Allow the live Backend's node reader and its
	// client's pool goroutines.
	for deadline := time.Now().Add(10 * time.Second); ; {
		g := runtime.NumGoroutine()
		if g <= baseG+10 {
			t.Logf("goroutines: %d, %d before the Backends", g, baseG)
			break
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines 10s after the churn, %d before: %s", g, baseG, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestReviewH71LeaseFootprint (review h71): 10,000 distinct lease keys (2,000
// with -short) on a NewURL Backend with the smallest FenceIdle and
// LeaseStatusWindow (1s), each taken through one of the lease paths:
// acquired and released, left to expire, revoked (its holder keeps it until
// it expires), force-revoked, transferred and released, held with a
// lease.Keeper and released, and revoked while the Keeper renews it. Once
// the TTL, FenceIdle and the status window passed, nothing is left under
// the prefix (SCAN), and the Keeper holds nothing (goroutines back).
func TestReviewH71LeaseFootprint(t *testing.T) {
	redistest.Require(t)
	n := 10_000
	if testing.Short() {
		n = 2000
	}
	srv := redistest.Start(t, redistest.Options{})
	c := srv.Client(t)
	ctx := context.Background()
	const prefix = "h71l"
	baseG := runtime.NumGoroutine()
	b, err := NewURL(ctx, srv.URL(), Options{Prefix: prefix, FenceIdle: time.Second, LeaseStatusWindow: time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	keeper := lease.NewKeeper(b, lease.KeeperOptions{})
	const ttl = 1500 * time.Millisecond
	const paths = 7
	var g errgroup.Group
	g.SetLimit(32)
	var kept sync.Map
	for i := range n {
		g.Go(func() error {
			key := fmt.Sprintf("k%d-%d", i%paths, i)
			switch i % paths {
			case 0: // acquired, released
				if _, err := b.AcquireLease(ctx, key, "a", ttl); err != nil {
					return err
				}
				return b.ReleaseLease(ctx, key, "a")
			case 1: // expires
				_, err := b.AcquireLease(ctx, key, "a", ttl)
				return err
			case 2: // revoked
				if _, err := b.AcquireLease(ctx, key, "a", ttl); err != nil {
					return err
				}
				return b.RevokeLease(ctx, key, "r")
			case 3: // force-revoked
				if _, err := b.AcquireLease(ctx, key, "a", ttl); err != nil {
					return err
				}
				return b.ForceRevokeLease(ctx, key, "r")
			case 4: // transferred, released
				if _, err := b.AcquireLease(ctx, key, "a", ttl); err != nil {
					return err
				}
				if _, err := b.TransferLease(ctx, key, "a", "b", ttl); err != nil {
					return err
				}
				return b.ReleaseLease(ctx, key, "b")
			case 5: // kept, released
				h, err := keeper.Keep(ctx, key, "a", ttl)
				if err != nil {
					return err
				}
				kept.Store(key, h)
				return nil
			case 6: // kept, revoked under the Keeper
				h, err := keeper.Keep(ctx, key, "a", ttl)
				if err != nil {
					return err
				}
				kept.Store(key, h)
				return b.RevokeLease(ctx, key, "r")
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(ttl) // the kept leases renewed at least once
	kept.Range(func(k, v any) bool {
		_ = v.(*lease.Held).Release(ctx)
		return true
	})
	before, _ := c.DBSize(ctx).Result()
	idle := time.Now()
	for {
		keys := scanAll(t, c, prefix+":*")
		if len(keys) == 0 {
			break
		}
		if time.Since(idle) > 15*time.Second {
			var ex []string
			for _, k := range keys[:min(len(keys), 10)] {
				ex = append(ex, fmt.Sprintf("%s (PTTL %v)", k.key, k.pttl))
			}
			t.Fatalf("15s after the last lease ended (TTL %v, FenceIdle and status window 1s): %d keys left, e.g. %q", ttl, len(keys), ex)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("%d keys at the end of the churn, none %v later", before, time.Since(idle).Round(time.Millisecond))
	// The Keeper's goroutine exits once it holds nothing (not closed here).
	for deadline := time.Now().Add(10 * time.Second); runtime.NumGoroutine() > baseG+10; {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines, %d before", runtime.NumGoroutine(), baseG)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestReviewH71DeadLetterTopicOfDrainedTopic (review h71): the dead-letter
// topic of a pubsub.ExpireWhenDrained topic is a topic of its own: the
// drained topic expires, its "<topic>.dead" stream stays, with no expiry
// (documented with ExpireWhenDrained and in the package doc); with
// Options.StreamIdleTTL it expires as any stream does.
func TestReviewH71DeadLetterTopicOfDrainedTopic(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t, redistest.Options{})
	c := srv.Client(t)
	for _, idle := range []time.Duration{0, 500 * time.Millisecond} {
		t.Run(fmt.Sprint("StreamIdleTTL=", idle), func(t *testing.T) {
			ctx := context.Background()
			b := urlBackend(t, srv.URL(), Options{StreamIdleTTL: idle, Logger: slog.New(slog.DiscardHandler)})
			const topic, group = "job-1", "own"
			sub, err := b.Subscribe(ctx, topic, func(context.Context, pubsub.Event) error { return errors.New("fails") },
				pubsub.Group(group), pubsub.ExpireWhenDrained(200*time.Millisecond), pubsub.MaxDeliveries(1))
			if err != nil {
				t.Fatal(err)
			}
			if err := b.PublishFor(ctx, topic, group, pubsub.Event{ID: "e", Type: "t"}); err != nil {
				t.Fatal(err)
			}
			key, dead := b.keys.Stream(topic), b.keys.Stream(pubsub.DeadLetterTopic(topic))
			for deadline := time.Now().Add(10 * time.Second); ; {
				if n, _ := c.Exists(ctx, key).Result(); n == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the drained topic is still there after 10s")
				}
				time.Sleep(20 * time.Millisecond)
			}
			if err := sub.Unsubscribe(ctx); err != nil {
				t.Fatal(err)
			}
			if n, _ := c.XLen(ctx, dead).Result(); n != 1 {
				t.Fatalf("dead-letter topic holds %d entries, want 1", n)
			}
			ms, _ := c.PTTL(ctx, dead).Result()
			if idle == 0 {
				if ms != -1 {
					t.Fatalf("dead-letter topic PTTL %v, want none", ms)
				}
				return
			}
			if ms <= 0 || ms > idle {
				t.Fatalf("dead-letter topic PTTL %v, want within StreamIdleTTL %v", ms, idle)
			}
			for deadline := time.Now().Add(10 * time.Second); ; {
				if n, _ := c.Exists(ctx, dead).Result(); n == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the dead-letter topic is still there 10s after, with StreamIdleTTL")
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}

// TestReviewH71ClusterBackendFootprint (review h71): the churn of distinct
// topics on a 3-master Cluster (default ClusterClient options), where each
// hash slot read gets a shared reader of its own and readers, node readers,
// ack lanes and pass slots are kept per master: once every subscription
// ended and the drained streams expired, no key is left on any master, and
// the Backend's per-topic tables are empty; what stays is per master (the
// batch lanes, at most maxLanes each, as documented).
func TestReviewH71ClusterBackendFootprint(t *testing.T) {
	redistest.Require(t)
	cl := redistest.StartCluster(t, 3)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()}) // go-redis defaults, as a user builds it
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	b := psBackend(t, c, Options{BlockTime: 100 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	n := 600
	if testing.Short() {
		n = 150
	}
	one := func(i int) error {
		topic := fmt.Sprint("ct", i)
		got := make(chan struct{}, 4)
		h := func(context.Context, pubsub.Event) error { got <- struct{}{}; return nil }
		var sub pubsub.Subscription
		var err error
		switch i % 3 {
		case 0:
			sub, err = b.Subscribe(ctx, topic, h, pubsub.Group("own"), pubsub.ExpireWhenDrained(200*time.Millisecond), pubsub.ReadOnDemand())
		case 1:
			sub, err = b.Subscribe(ctx, topic, h)
		case 2:
			sub, err = b.Subscribe(ctx, topic, h, pubsub.Group("g"))
		}
		if err != nil {
			return err
		}
		if err := b.PublishFor(ctx, topic, "own", pubsub.Event{Type: "t"}); err != nil {
			return err
		}
		if k, ok := sub.(pubsub.Kicker); ok {
			k.Kick()
		}
		select {
		case <-got:
		case <-time.After(20 * time.Second):
			return fmt.Errorf("%s: not delivered", topic)
		}
		if err := sub.Unsubscribe(ctx); err != nil {
			return err
		}
		if i%3 != 0 {
			return b.DeleteTopic(ctx, topic)
		}
		return nil
	}
	var g errgroup.Group
	g.SetLimit(16)
	for i := range n {
		g.Go(func() error { return one(i) })
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	prefix := b.opts.Prefix
	for deadline := time.Now().Add(20 * time.Second); ; {
		var mu sync.Mutex
		var left []string
		err := c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			ks := scanAll(t, m, prefix+":*")
			mu.Lock()
			for _, k := range ks {
				left = append(left, fmt.Sprintf("%s (%s, PTTL %v)", k.key, k.typ, k.pttl))
			}
			mu.Unlock()
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		m := busMapsOf(b)
		perMaster := m.pubLanes <= maxLanes && m.readLanes <= maxLanes && m.masterPasses <= maxLanes
		m.pubLanes, m.readLanes, m.masterPasses = 0, 0, 0
		if len(left) == 0 && m.zero() && perMaster {
			t.Logf("per-master tables left: %+v", busMapsOf(b))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("20s after the churn of %d topics: %d keys, e.g. %q; tables %+v", n, len(left), left[:min(len(left), 10)], busMapsOf(b))
		}
		time.Sleep(100 * time.Millisecond)
	}
}
