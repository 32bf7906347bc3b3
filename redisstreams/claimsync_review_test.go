package redisstreams

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// Review revY tests (adversarial review of the claim's WAIT).

// TestReviewUnsyncedClaimsInflateCount (review revY; passes since
// undoClaim puts the count back, failed without it: dead-lettered, count
// 5 before the resume): every claim the replicas did not
// acknowledge raised the delivery count on the master, and neither path
// put it back: the ClaimPending pass retries (each retry claims again, +1;
// about one every 0.2-2.2s), the stale pass hands back with the claim's
// count kept (+1 per reclaim interval). A stall of a few seconds thus
// pushes an entry that was delivered once and never run by any handler
// past MaxDeliveries(3): when replicas acknowledge again it is
// dead-lettered ("delivered N times without an ack") without a handler
// ever running it. Reads do not do this (recoverLost keeps the count:
// "not counted as a redelivery, nor as an extra attempt towards
// MaxDeliveries").
func TestReviewUnsyncedClaimsInflateCount(t *testing.T) {
	t.Parallel()
	st := redistest.StartSentinel(t, 1)
	b := psBackend(t, st.Client(t), Options{PublishSyncReplicas: 1, PublishSyncTimeout: 200 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	ctx := t.Context()
	master := st.Master().Client(t)
	for _, name := range []string{"ClaimPending", "reclaim"} {
		claimPending := name == "ClaimPending"
		t.Run(name, func(t *testing.T) {
			topic := "review-inflate-" + name
			key := b.keys.Stream(topic)
			awaitSynced(t, b, topic)
			if err := master.XGroupCreate(ctx, key, "g", "$").Err(); err != nil {
				t.Fatal(err)
			}
			publishSynced(t, b, master, topic, "e1")
			// The dead member's read is replicated: the entry was
			// delivered once, and no handler ever runs it before the
			// stall.
			id := deadRead(t, master, key)
			replica := replicaOf(t, st)
			awaitSynced(t, b, topic+"-sync") // the read is on the replica
			replica.Pause(t)
			resumed := false
			defer func() {
				if !resumed {
					replica.Resume(t)
				}
			}()
			const ackDeadline = time.Second
			log := newDeliveryLog()
			dead := newDeliveryLog()
			dsub, err := b.Subscribe(ctx, pubsub.DeadLetterTopic(topic), dead.handler("dlq", "e1"))
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = dsub.Unsubscribe(ctx) }()
			opts := []pubsub.SubscribeOption{pubsub.Group("g"), pubsub.AckDeadline(ackDeadline), pubsub.MaxDeliveries(3)}
			if claimPending {
				opts = append(opts, pubsub.ClaimPending())
			}
			sub, err := b.Subscribe(ctx, topic, log.handler("B", "e1"), opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = sub.Unsubscribe(ctx) }()
			// A stall of 5s (the sentinel would not even fail over).
			time.Sleep(5 * time.Second)
			pend, _ := master.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: key, Group: "g", Start: id, End: id, Count: 1}).Result()
			t.Logf("before the resume: XPENDING %+v", pend)
			replica.Resume(t)
			resumed = true
			got := log.await(1, 10*time.Second)
			if len(got) == 0 {
				t.Errorf("e1 (delivered once, to a member that died, and never run) was not handed to a handler within 10s of the resume; dead letters: %d, XPENDING before the resume: %+v", len(dead.await(1, time.Second)), pend)
			} else if got[0].attempt != 2 {
				t.Errorf("e1 handed on as attempt %d, want 2 (one delivery before, to the dead member)", got[0].attempt)
			}
		})
	}
}

// TestReviewHandBackUnsyncedRunsTwice (review revY, found against the
// first version of the claim's wait, handBackUnsynced, since replaced by
// undoClaim; the test now waits for the claim to be put back on "dead"
// where it waited for the hand-back): handBackUnsynced left the entry
// pending on the claimer idle for a year. When the claimer's reads were
// unacknowledged too (suspect, and the entry above lostFrom), its read
// loop takes that entry as one a lost read delivered (recoverLost) as soon
// as a read's WAIT succeeds, without resetting its idle time, and runs it;
// meanwhile any other member's stale pass (idle >= AckDeadline) claims it
// at once and runs it too: one entry on two handlers at once, well within
// the first one's AckDeadline.
func TestReviewHandBackUnsyncedRunsTwice(t *testing.T) {
	t.Parallel()
	st := redistest.StartSentinel(t, 1)
	b := psBackend(t, st.Client(t), Options{PublishSyncReplicas: 1, PublishSyncTimeout: 200 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	ctx := t.Context()
	master := st.Master().Client(t)
	const topic = "review-handback-twice"
	key := b.keys.Stream(topic)
	awaitSynced(t, b, topic)
	if err := master.XGroupCreate(ctx, key, "g", "$").Err(); err != nil {
		t.Fatal(err)
	}
	publishSynced(t, b, master, topic, "e1")
	replica := replicaOf(t, st)
	replica.Pause(t)
	resumed := false
	defer func() {
		if !resumed {
			replica.Resume(t)
		}
	}()
	id := deadRead(t, master, key)
	const ackDeadline = 6 * time.Second // a reclaim pass every 3s
	release := make(chan struct{})
	defer close(release)
	type run struct {
		who     string
		attempt int
		start   time.Time
		end     time.Time
	}
	var (
		mu   sync.Mutex
		runs []*run
	)
	started := make(chan struct{}, 8)
	handler := func(who string) pubsub.Handler {
		return func(ctx context.Context, ev pubsub.Event) error {
			if ev.ID != "e1" {
				return nil
			}
			r := &run{who: who, attempt: ev.DeliveryAttempt, start: time.Now()}
			mu.Lock()
			runs = append(runs, r)
			mu.Unlock()
			started <- struct{}{}
			select { // a handler that takes a while (well within AckDeadline)
			case <-release:
			case <-time.After(ackDeadline * 9 / 10):
			case <-ctx.Done():
			}
			mu.Lock()
			r.end = time.Now()
			mu.Unlock()
			return nil
		}
	}
	subB, err := b.Subscribe(ctx, topic, handler("B"), pubsub.Group("g"), pubsub.AckDeadline(ackDeadline))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = subB.Unsubscribe(context.Background()) }()
	// B reads e2 during the stall: its read is unacknowledged, so B is
	// suspect from the start (lostFrom ""): e1, once on B, counts as a
	// lost read's entry.
	time.Sleep(200 * time.Millisecond)
	_ = b.Publish(ctx, topic, pubsub.Event{ID: "e2", Type: "t"}) // ErrNotReplicated: on the master
	// B's stale pass claims e1 from "dead" (silent for AckDeadline), the
	// WAIT fails, and the claim is undone.
	// Claimed (count 2), the WAIT failed, and the claim is put back.
	pendingOn(t, master, key, "g", id, "dead", 2, ackDeadline+8*time.Second, func() bool { return false })
	awaitPutBack(t, master, key, id)
	replica.Resume(t)
	resumed = true
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("e1 not run within 10s of the resume")
	}
	pend, _ := master.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: key, Group: "g", Start: id, End: id, Count: 1}).Result()
	t.Logf("while %s runs e1: XPENDING %+v", runs[0].who, pend)
	// Another member joins; within AckDeadline of the first run's start
	// it must not run e1.
	subC, err := b.Subscribe(ctx, topic, handler("C"), pubsub.Group("g"), pubsub.AckDeadline(ackDeadline))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = subC.Unsubscribe(context.Background()) }()
	select {
	case <-started:
	case <-time.After(ackDeadline * 8 / 10):
	}
	mu.Lock()
	defer mu.Unlock()
	if len(runs) > 1 {
		first, second := runs[0], runs[1]
		overlap := first.end.IsZero() || second.start.Before(first.end)
		t.Errorf("e1 ran twice: %s (attempt %d) from %v, then %s (attempt %d) %v after the first started (first still running: %v; AckDeadline %v)",
			first.who, first.attempt, first.start.Format("15:04:05.000"), second.who, second.attempt, second.start.Sub(first.start), overlap, ackDeadline)
	}
}

// TestReviewHandBackOnDemandBusyStuck (review revY, against handBackUnsynced,
// since replaced by undoClaim; failed with no undo: the claim stayed on
// the subscription): handBackUnsynced noted an on-demand
// subscription kicked for one pass only (an on-demand ClaimPending
// subscription, as the signals runtime's inbox, whose tokens are its
// Concurrency). When that pass finds no free
// token (its one handler is running something else: in the signals
// runtime, a run), reclaim returns at once and, the entry being its own
// now, othersHold is false, so nothing notes it kicked again: the entry
// stays pending on it, idle a year, and no later pass looks at it until
// the next Kick (in the signals runtime, the next signal to that inbox).
// Before the hand-back existed, the entry stayed on the dead member, and
// othersHold kept the subscription looking.
func TestReviewHandBackOnDemandBusyStuck(t *testing.T) {
	t.Parallel()
	st := redistest.StartSentinel(t, 1)
	b := psBackend(t, st.Client(t), Options{PublishSyncReplicas: 1, PublishSyncTimeout: 200 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	ctx := t.Context()
	master := st.Master().Client(t)
	const topic = "review-handback-ondemand-busy"
	key := b.keys.Stream(topic)
	awaitSynced(t, b, topic)
	if err := master.XGroupCreate(ctx, key, "g", "$").Err(); err != nil {
		t.Fatal(err)
	}
	const ackDeadline = time.Second
	log := newDeliveryLog()
	busy := make(chan struct{})
	h := func(ctx context.Context, ev pubsub.Event) error {
		if ev.ID == "e3" {
			select { // a long run of something else
			case <-time.After(2 * time.Second):
			case <-ctx.Done():
			}
			close(busy)
			return nil
		}
		return log.handler("B", "e1")(ctx, ev)
	}
	// As the signals runtime's inbox subscription: ClaimPending (so its
	// tokens are its Concurrency, 1), ReadOnDemand. It starts before the
	// stall, with nothing pending.
	sub, err := b.Subscribe(ctx, topic, h, pubsub.Group("g"), pubsub.AckDeadline(ackDeadline), pubsub.ReadOnDemand(), pubsub.Concurrency(1), pubsub.ClaimPending())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe(context.Background()) }()
	time.Sleep(100 * time.Millisecond) // its first read: nothing
	publishSynced(t, b, master, topic, "e1")
	replica := replicaOf(t, st)
	replica.Pause(t)
	resumed := false
	defer func() {
		if !resumed {
			replica.Resume(t)
		}
	}()
	id := deadRead(t, master, key)
	sub.(pubsub.Kicker).Kick()
	// Claimed (count 2), the WAIT failed, and the claim is put back.
	pendingOn(t, master, key, "g", id, "dead", 2, ackDeadline+8*time.Second, func() bool { return false })
	awaitPutBack(t, master, key, id)
	replica.Resume(t)
	resumed = true
	// The stall is over. Something new arrives and is run (2s, several
	// reclaim intervals); the pass after the hand-back finds no token.
	if err := b.Publish(ctx, topic, pubsub.Event{ID: "e3", Type: "t"}); err != nil {
		t.Logf("publish e3: %v", err)
	}
	sub.(pubsub.Kicker).Kick()
	select {
	case <-busy:
	case <-time.After(10 * time.Second):
		t.Fatal("e3 not run")
	}
	if got := log.await(1, 5*time.Second); len(got) == 0 {
		pend, _ := master.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: key, Group: "g", Start: id, End: id, Count: 1}).Result()
		t.Errorf("e1 not handed on within 7s of the stall's end (no further Kick): XPENDING %+v", pend)
	}
}

// awaitPutBack waits until entry id of group g is pending on "dead" again
// (undoClaim put back the claim the replicas did not acknowledge), with
// its count 1.
func awaitPutBack(t *testing.T, c *redis.Client, key, id string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		pend, err := c.XPendingExt(context.Background(), &redis.XPendingExtArgs{Stream: key, Group: "g", Start: id, End: id, Count: 1}).Result()
		if err == nil && len(pend) == 1 && pend[0].Consumer == "dead" {
			if pend[0].RetryCount != 1 {
				t.Errorf("put back with count %d, want 1 (as before the claim)", pend[0].RetryCount)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the unacknowledged claim of %s was not put back within 5s: %+v, %v", id, pend, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestReviewDeadLetterRepeatsDuringStall (review revY; failed before
// publishDead counted such a dead letter stored on one master: 8 copies):
// with PublishSyncReplicas, a dead
// letter published during a replication stall returns ErrNotReplicated
// although it is stored on the master; Handle then nacks, the entry is
// redelivered (retryLoop's claim, not waited for), and each redelivery
// (an attempt above MaxDeliveries) publishes the dead letter again. When
// the stall ends the dead-letter topic holds one copy per redelivery, each
// a new entry that a dead-letter subscriber gets as DeliveryAttempt 1.
func TestReviewDeadLetterRepeatsDuringStall(t *testing.T) {
	t.Parallel()
	st := redistest.StartSentinel(t, 1)
	b := psBackend(t, st.Client(t), Options{PublishSyncReplicas: 1, PublishSyncTimeout: 200 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	ctx := t.Context()
	master := st.Master().Client(t)
	const topic = "review-dead-repeat"
	awaitSynced(t, b, topic)
	replica := replicaOf(t, st)
	var once sync.Once
	paused := make(chan struct{})
	h := func(ctx context.Context, ev pubsub.Event) error {
		if ev.ID == "e1" {
			once.Do(func() { replica.Pause(t); close(paused) })
			return context.DeadlineExceeded // fails: dead-lettered (MaxDeliveries 1)
		}
		return nil
	}
	sub, err := b.Subscribe(ctx, topic, h, pubsub.Group("g"), pubsub.MaxDeliveries(1), pubsub.Concurrency(2))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe(context.Background()) }()
	// The handler pauses the replica as soon as e1 is delivered, which may
	// be before this publish's WAIT counted it: ErrNotReplicated then says
	// e1 is on the master, which is all this test needs (waiting for the
	// replica, as publishSynced does, would wait for the paused one).
	if err := b.Publish(ctx, topic, pubsub.Event{ID: "e1", Type: "t"}); err != nil && !errors.Is(err, ErrNotReplicated) {
		t.Fatal(err)
	}
	select {
	case <-paused:
	case <-time.After(10 * time.Second):
		t.Fatal("e1 not run")
	}
	time.Sleep(3 * time.Second)
	replica.Resume(t)
	time.Sleep(2 * time.Second)
	dead, err := master.XRange(ctx, b.keys.Stream(pubsub.DeadLetterTopic(topic)), "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, m := range dead {
		if m.Values["id"] == "e1" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("the dead-letter topic holds %d copies of e1, want 1 (each a first delivery to its subscribers)", n)
	}
}
