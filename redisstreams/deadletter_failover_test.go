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

// TestDeadLetterUnsyncedLostInFailover tests what publishDead argues when
// it counts a dead letter the replicas did not acknowledge as stored (on
// one master, PublishSyncReplicas): the failed entry's ack reaches the
// replicas after the dead letter, so a failover that loses the dead
// letter loses the ack too, and the entry is dead-lettered again, never
// acked without one. Here a handler fails e1 (MaxDeliveries 1) and stalls
// replication as it returns, so the dead letter and the ack are on the
// master only; the master is killed and a replica that has neither is
// promoted. Asserted: before the kill the master held the dead letter
// and had acked e1; the promoted master never holds that dead letter (the
// failover lost it: the premise); within a bound, it holds another dead
// letter of e1 and nothing pending: e1's dead letter is not lost.
func TestDeadLetterUnsyncedLostInFailover(t *testing.T) {
	st := redistest.StartSentinel(t, 2)
	b := psBackend(t, st.Client(t), Options{PublishSyncReplicas: 1, PublishSyncTimeout: 200 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	ctx := t.Context()
	const topic = "dead-failover"
	key := b.keys.Stream(topic)
	deadKey := b.keys.Stream(pubsub.DeadLetterTopic(topic))
	awaitSynced(t, b, topic)
	var (
		once   sync.Once
		resume func()
	)
	stalled := make(chan struct{})
	h := func(ctx context.Context, ev pubsub.Event) error {
		if ev.ID == "e1" {
			// The read that delivered e1 was waited for: the
			// replicas have e1 pending with count 1.
			once.Do(func() { resume = st.StallReplication(t); close(stalled) })
			return errors.New("fails") // dead-lettered (MaxDeliveries 1)
		}
		return nil
	}
	const ackDeadline = time.Second
	sub, err := b.Subscribe(ctx, topic, h, pubsub.Group("g"), pubsub.MaxDeliveries(1), pubsub.AckDeadline(ackDeadline))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe(context.Background()) }()
	if err := b.Publish(ctx, topic, pubsub.Event{ID: "e1", Type: "t"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-stalled:
	case <-time.After(10 * time.Second):
		t.Fatal("e1 not run within 10s")
	}
	resumed := false
	defer func() {
		if !resumed {
			resume()
		}
	}()
	// The premise: the dead letter (its WAIT fell short after
	// PublishSyncTimeout, 200ms) counted as stored, and e1 acked, on the
	// master only. The sentinel deems a paused replica down after 2s, so
	// the failover must start before then.
	master := st.Master().Client(t)
	deadline := time.Now().Add(1500 * time.Millisecond)
	var lostID string
	for {
		ids, pending := deadLetters(t, master, deadKey, "e1"), groupPending(t, master, key, "g")
		if len(ids) == 1 && pending == 0 {
			lostID = ids[0]
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("premise: 1.5s after the stall the master holds dead letters %v of e1 and %d pending entries; want one and 0 (dead letter counted stored, e1 acked)", ids, pending)
		}
		time.Sleep(10 * time.Millisecond)
	}
	resumed = true
	start := time.Now()
	st.FailoverAfterKill(t, resume)
	promoted := st.Master().Client(t)
	// e1 is pending on the promoted master with no live handler (its ack
	// was lost with the master): the subscription takes it over after
	// the ack deadline and dead-letters it again (its count is past
	// MaxDeliveries), possibly before the failover call above returns.
	// Generous: the client's reconnection, a reclaim interval, the ack
	// deadline, and a loaded machine.
	bound := 30 * time.Second
	for {
		ids, pending := deadLetters(t, promoted, deadKey, "e1"), groupPending(t, promoted, key, "g")
		for _, id := range ids {
			if id == lostID {
				t.Fatalf("premise: the promoted master holds the dead letter %s written during the stall; the stall did not keep it from the replicas", id)
			}
		}
		if len(ids) >= 1 && pending == 0 {
			t.Logf("the dead letter %s was lost with the master; e1 dead-lettered again as %v, %v after the kill began", lostID, ids, time.Since(start).Round(time.Millisecond))
			return
		}
		if time.Since(start) > bound {
			t.Fatalf("%v after the failover began the promoted master holds dead letters %v of e1 and %d pending entries: the dead letter %s the failover lost was not published again", bound, ids, pending, lostID)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// deadLetters returns the stream ids of the entries of the dead-letter
// stream key whose event id is id.
func deadLetters(t *testing.T, c *redis.Client, key, id string) []string {
	t.Helper()
	msgs, err := c.XRange(t.Context(), key, "-", "+").Result()
	if err != nil {
		t.Fatalf("XRANGE %s: %v", key, err)
	}
	var ids []string
	for _, m := range msgs {
		if m.Values["id"] == id {
			ids = append(ids, m.ID)
		}
	}
	return ids
}

// groupPending returns how many entries of key are pending in group.
func groupPending(t *testing.T, c *redis.Client, key, group string) int64 {
	t.Helper()
	p, err := c.XPending(t.Context(), key, group).Result()
	if err != nil {
		t.Fatalf("XPENDING %s %s: %v", key, group, err)
	}
	return p.Count
}
