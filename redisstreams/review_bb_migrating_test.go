package redisstreams

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// TestReviewBBHandBackWhileSlotMigrates (review BB): while a Cluster slot
// migrates (MIGRATING on the source, IMPORTING on the target, as redis-cli
// --cluster reshard leaves it while it moves the slot's keys, or for good
// when it stops half way) and the topic's stream is still on the source, a
// group member that nacked an entry stops. hand_back.lua declares two keys,
// the stream and the group's hand-back notice, and the notice, absent as it
// is unless a hand-back happened lately, is not on the source: Redis
// answers TRYAGAIN to a command of several keys in a migrating slot unless
// all of them are there, so the hand-back failed ("hand back unstarted or
// nacked entries failed; they are reclaimed after the ack deadline"), and
// the other member, live on the same Backend, got the entry only after the
// ack deadline (20s here). Before the notice was added the script declared
// the stream alone and ran on the source. Its consumer was not deleted
// either (delete_consumer.lua, same two keys).
func TestReviewBBHandBackWhileSlotMigrates(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	c := cl.Client(t)
	const (
		deadline = 20 * time.Second
		bound    = 5 * time.Second
	)
	b := psBackend(t, c, Options{Logger: slog.New(slog.DiscardHandler)})
	ctx := context.Background()
	topic := "rbbmig"
	key := b.keys.Stream(topic)
	awaitSynced(t, b, topic)

	nacked := make(chan int, 4)
	a, err := b.Subscribe(ctx, topic, func(_ context.Context, e pubsub.Event) error {
		nacked <- e.DeliveryAttempt
		return errors.New("nack")
	}, pubsub.Group("g"), pubsub.AckDeadline(deadline), pubsub.RedeliveryDelay(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	consumerA := a.(*groupSub).consumer
	if err := b.Publish(ctx, topic, pubsub.Event{ID: "e1", Type: "e1"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-nacked:
	case <-time.After(5 * time.Second):
		t.Fatal("A never got e1")
	}
	got := make(chan pubsub.Event, 4)
	heir, err := b.Subscribe(ctx, topic, func(_ context.Context, e pubsub.Event) error {
		got <- e
		return nil
	}, pubsub.Group("g"), pubsub.AckDeadline(deadline))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = heir.Unsubscribe(context.Background()) }()

	// The migration, opened and left unfinished: every key of the slot
	// still on the source.
	m := cl.StartSlotMove(t, key)
	defer func() {
		m.MigrateRest()
		m.Finish()
	}()
	if n, err := c.Exists(ctx, handBackMark(b, topic, "g")).Result(); err != nil || n != 0 {
		t.Fatalf("hand-back notice: exists %d, %v; want none yet", n, err)
	}

	stopped := time.Now()
	if err := a.Unsubscribe(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-got:
		took := time.Since(stopped)
		t.Logf("e1 (attempt %d) reached the other member %v after A's Unsubscribe began", e.DeliveryAttempt, took.Round(time.Millisecond))
		if took > bound {
			t.Errorf("e1 reached the other member %v after A stopped, want within %v (ack deadline %v)", took.Round(time.Millisecond), bound, deadline)
		}
		if e.DeliveryAttempt != 2 {
			t.Errorf("e1 attempt %d, want 2", e.DeliveryAttempt)
		}
	case <-time.After(deadline + 10*time.Second):
		t.Fatal("e1 never redelivered")
	}
	// A's consumer went once its entry was taken over.
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		cs, err := m.Admin(m.From).XInfoConsumers(ctx, key, "g").Result()
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, ci := range cs {
			found = found || ci.Name == consumerA
		}
		if !found {
			break
		}
		if time.Now().After(end) {
			t.Errorf("consumer %s of the stopped member is still in the group", consumerA)
			break
		}
	}
}
