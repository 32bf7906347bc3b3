package redisstreams

import (
	"context"
	"errors"
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

// TestSyncClusterFollowsAsk: with PublishSyncReplicas and LeaseSyncReplicas
// on a Cluster (3 masters, a replica each), a slot's migration is opened
// (SETSLOT IMPORTING on the target, MIGRATING on the source) and left
// unfinished, with the keys of topic "moved" migrated (one MIGRATE ... KEYS,
// as a batch of redis-cli --cluster reshard) and those of topic "stays", in
// the same slot, not. While it lasts the source answers ASK for "moved"'s
// keys, and the synced calls, sent to the source's own client, used to fail
// with that ASK. Asserted while the migration is unfinished: synced
// publishes to "moved" succeed (sent again, after ASKING, to the target),
// and so do those to "stays" (run on the source), one batch holding both
// (one pipeline, part run on the source, part on the target) too; with the
// target's replica paused a publish to "moved" fails with ErrNotReplicated
// (its WAIT counts the target's replicas) while one to "stays" succeeds; a
// group subscription to "moved" gets the events published during the
// migration (its reads, synced, go to the target); a synced claim of an
// entry of "moved" succeeds; and lease calls of the slot, tried again until
// their ctx ends, fail then with TRYAGAIN, never ASK and never a win (their scripts declare the lease's revoked mark,
// which does not exist, and Redis refuses a multi-key command in a
// migrating slot unless all its keys are on the node: this is Redis's rule,
// for every client; a Backend without the sync options fails the same way). Then the migration ends and everything works again,
// leases included. At the end each event published is in its stream once
// and was delivered to the group once.
func TestSyncClusterFollowsAsk(t *testing.T) {
	cl := redistest.StartClusterReplicas(t, 3, 1)
	c := cl.Client(t)
	const timeout = 500 * time.Millisecond
	b := psBackend(t, c, Options{PublishSyncReplicas: 1, LeaseSyncReplicas: 1, PublishSyncTimeout: timeout, LeaseSyncTimeout: timeout,
		Logger: slog.New(slog.DiscardHandler)})
	ctx := t.Context()
	const bound = 10 * time.Second

	// Two names whose keys share a hash slot (a name is its keys' hash tag,
	// topic and lease alike).
	moved := "moved"
	slot := keys.Slot(b.keys.Stream(moved))
	stays := ""
	for i := 0; stays == "" && i < 1_000_000; i++ {
		if n := fmt.Sprint("stays-", i); keys.Slot(b.keys.Stream(n)) == slot {
			stays = n
		}
	}
	if stays == "" {
		t.Fatalf("no name found in slot %d", slot)
	}
	awaitSynced(t, b, moved)
	awaitSynced(t, b, stays)

	var (
		mu        sync.Mutex
		delivered = map[string]int{}
	)
	arrived := make(chan struct{}, 64)
	sub, err := b.Subscribe(ctx, moved, func(_ context.Context, e pubsub.Event) error {
		mu.Lock()
		delivered[e.ID]++
		mu.Unlock()
		arrived <- struct{}{}
		return nil
	}, pubsub.Group("g"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe(context.Background()) }()
	awaitDelivered := func(t *testing.T, id string) time.Duration {
		t.Helper()
		start := time.Now()
		deadline := time.After(bound)
		for {
			mu.Lock()
			n := delivered[id]
			mu.Unlock()
			if n > 0 {
				return time.Since(start)
			}
			select {
			case <-arrived:
			case <-deadline:
				t.Fatalf("%s not delivered within %v", id, bound)
			}
		}
	}
	var published []string // the IDs of the events to "moved" whose publish returned nil or ErrNotReplicated
	publish := func(topic, id string) error {
		err := b.Publish(ctx, topic, pubsub.Event{ID: id, Type: "t"})
		if topic == moved && (err == nil || errors.Is(err, ErrNotReplicated)) {
			published = append(published, id)
		}
		return err
	}
	if err := publish(moved, "before"); err != nil {
		t.Fatal(err)
	}
	awaitDelivered(t, "before")
	for _, name := range []string{moved, stays} {
		if r, err := b.AcquireLease(ctx, name, "o", time.Minute); err != nil || !r.Acquired {
			t.Fatalf("AcquireLease(%s) before the migration = %+v, %v", name, r, err)
		}
	}

	// The migration, left unfinished: "moved"'s keys on the target.
	m := cl.StartSlotMove(t, b.keys.Stream(moved))
	ks, err := m.Admin(m.From).ClusterGetKeysInSlot(context.Background(), m.Slot, 1000).Result()
	if err != nil {
		t.Fatal(err)
	}
	var move, left []string
	for _, k := range ks {
		if strings.Contains(k, "{"+moved+"}") {
			move = append(move, k)
		} else {
			left = append(left, k)
		}
	}
	if len(left) == 0 || !strings.Contains(strings.Join(left, " "), "{"+stays+"}") {
		t.Fatalf("keys of slot %d: %v; want some of %q's", m.Slot, ks, stays)
	}
	m.Migrate(move...)
	t.Logf("slot %d migrating from %s to %s: %d keys moved (%q's), %d left", m.Slot, m.From, m.To, len(move), moved, len(left))
	if err := c.Do(ctx, "XLEN", b.keys.Stream(moved)).Err(); err != nil {
		t.Fatalf("XLEN through the ClusterClient (go-redis follows ASK): %v", err)
	}

	t.Run("publish", func(t *testing.T) {
		for i := range 5 {
			for _, topic := range []string{moved, stays} {
				if err := publish(topic, fmt.Sprint("during-", i)); err != nil {
					t.Errorf("synced publish %d to %q while its slot migrates: %v", i, topic, err)
				}
			}
		}
		// One batch of both (one pipeline on the source: "stays"'s XADD
		// runs there, "moved"'s is answered ASK and sent to the target).
		var reqs []*pubReq
		for _, topic := range []string{stays, moved} {
			fields, err := b.encodeFor(topic, pubsub.Event{ID: "unit", Type: "t"})
			if err != nil {
				t.Fatal(err)
			}
			reqs = append(reqs, &pubReq{key: b.keys.Stream(topic), fields: fields})
		}
		reqs[0].then = reqs[1:]
		if err := b.bus.publishUnit(ctx, reqs[0]); err != nil {
			t.Errorf("a unit over both topics while the slot migrates = %v, want nil", err)
		} else {
			published = append(published, "unit")
		}
	})

	resumed := ""
	t.Run("waitCountsTarget", func(t *testing.T) {
		rs := cl.ReplicasOf(t, m.To)
		if len(rs) != 1 {
			t.Fatalf("target %s has %d replicas, want 1", m.To, len(rs))
		}
		rs[0].Pause(t)
		err := publish(moved, "paused")
		err2 := publish(stays, "paused")
		rs[0].Resume(t)
		if !errors.Is(err, ErrNotReplicated) || !strings.Contains(err.Error(), m.To) {
			t.Errorf("publish to %q with the target's replica paused = %v; want ErrNotReplicated naming %s", moved, err, m.To)
		}
		if err2 != nil {
			t.Errorf("publish to %q (on the source) with the target's replica paused = %v; want nil", stays, err2)
		}
		// Each try its own event: one that failed with ErrNotReplicated
		// is stored all the same.
		tries := 0
		d, _, err := redistest.RetryUntil(2*redistest.ReadyTimeout, func() error {
			tries++
			resumed = fmt.Sprint("resumed-", tries)
			return publish(moved, resumed)
		})
		if err != nil {
			t.Fatalf("publish to %q after the target's replica resumed: %v", moved, err)
		}
		t.Logf("publish to %q succeeded %v after the target's replica resumed (try %d)", moved, d.Round(time.Millisecond), tries)
	})

	t.Run("group", func(t *testing.T) {
		for _, id := range []string{"during-0", "during-4", "unit", resumed} {
			d := awaitDelivered(t, id)
			t.Logf("%s delivered (waited %v)", id, d.Round(time.Millisecond))
		}
	})

	t.Run("claim", func(t *testing.T) {
		stream := b.keys.Stream(moved)
		if err := c.XGroupCreate(ctx, stream, "other", "0").Err(); err != nil {
			t.Fatal(err)
		}
		got, err := c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "other", Consumer: "first", Streams: []string{stream, ">"}, Count: 1}).Result()
		if err != nil || len(got) != 1 || len(got[0].Messages) != 1 {
			t.Fatalf("XREADGROUP through the ClusterClient: %v, %v", got, err)
		}
		id := got[0].Messages[0].ID
		msgs, err := b.bus.xclaim(ctx, &redis.XClaimArgs{Stream: stream, Group: "other", Consumer: "second", Messages: []string{id}})
		if err != nil || len(msgs) != 1 {
			t.Errorf("synced XCLAIM of %s on %q while its slot migrates = %v, %v; want it claimed", id, moved, msgs, err)
		}
	})

	t.Run("leaseTryAgain", func(t *testing.T) {
		// Without the sync options too: Redis's rule, not the Backend's.
		// The calls are tried again until their ctx ends
		// (TestLeaseCallsRideThroughSlotMove); then they fail with the
		// refusal, or with the ctx's end when that cut a try short.
		plain := psBackend(t, c, Options{Prefix: b.opts.Prefix, Logger: slog.New(slog.DiscardHandler)})
		refused := func(err error) bool {
			return err != nil && (strings.Contains(err.Error(), "TRYAGAIN") || strings.Contains(err.Error(), "deadline"))
		}
		for _, name := range []string{moved, stays} {
			cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			if ok, err := plain.RenewLease(cctx, name, "o", time.Minute); ok || !refused(err) {
				t.Errorf("RenewLease(%s) without the sync options while its slot migrates = %v, %v; want a TRYAGAIN error", name, ok, err)
			}
			cancel()
			cctx, cancel = context.WithTimeout(ctx, 300*time.Millisecond)
			r, err := b.AcquireLease(cctx, name, "o", time.Minute)
			if r.Acquired || !refused(err) {
				t.Errorf("AcquireLease(%s) while its slot migrates = %+v, %v; want a TRYAGAIN error", name, r, err)
			}
			cancel()
			cctx, cancel = context.WithTimeout(ctx, 300*time.Millisecond)
			ok, err := b.RenewLease(cctx, name, "o", time.Minute)
			if ok || !refused(err) {
				t.Errorf("RenewLease(%s) while its slot migrates = %v, %v; want a TRYAGAIN error", name, ok, err)
			}
			cancel()
		}
	})

	m.MigrateRest()
	m.Finish()

	t.Run("after", func(t *testing.T) {
		var last string
		for _, topic := range []string{moved, stays} {
			d, failed, err := redistest.RetryUntil(bound, func() error {
				last = fmt.Sprint("after-", topic, "-", time.Now().UnixNano())
				return publish(topic, last)
			})
			if err != nil {
				t.Fatalf("publish to %q after the migration: %v", topic, err)
			}
			t.Logf("publish to %q succeeded %v after the migration ended (%d calls failed first)", topic, d.Round(time.Millisecond), failed)
			if topic == moved {
				awaitDelivered(t, last)
			}
		}
		for _, name := range []string{moved, stays} {
			if _, _, err := redistest.RetryUntil(bound, func() error {
				ok, err := b.RenewLease(ctx, name, "o", time.Minute)
				if err == nil && !ok {
					err = fmt.Errorf("not held")
				}
				return err
			}); err != nil {
				t.Errorf("RenewLease(%s) after the migration: %v", name, err)
			}
			if r, err := b.AcquireLease(ctx, name, "o", time.Minute); err != nil || !r.Acquired {
				t.Errorf("AcquireLease(%s) by its holder after the migration = %+v, %v", name, r, err)
			}
		}
	})

	// Each event once in the stream, and delivered once.
	msgs, err := c.XRange(ctx, b.keys.Stream(moved), "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	inStream := map[string]int{}
	for _, msg := range msgs {
		if id, _ := msg.Values[fieldID].(string); id != "" {
			inStream[id]++
		}
	}
	for _, id := range published {
		if inStream[id] != 1 {
			t.Errorf("event %s is in %q's stream %d times, want once", id, moved, inStream[id])
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for id, n := range delivered {
		if n != 1 {
			t.Errorf("%s delivered %d times, want once", id, n)
		}
	}
}
