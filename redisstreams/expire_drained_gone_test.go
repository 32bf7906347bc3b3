package redisstreams

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// TestExpireWhenDrainedGoneAcks: a pubsub.ExpireWhenDrained subscription
// that takes over an entry pending on a dead member and finds it deleted
// (trimmed, XDEL) acks it in the step that sets the drained stream's
// expiry, as the acker's acks do. Before, that ack was a bare XACK: a
// stream drained by it stayed for ever once its subscribers were gone.
func TestExpireWhenDrainedGoneAcks(t *testing.T) {
	redistest.ForEachDeployment(t, func(t *testing.T, d *redistest.Deployed) {
		const (
			ttl   = 500 * time.Millisecond
			group = "owner"
			topic = "gone"
		)
		c := d.NewClient(t)
		b := psBackend(t, c, Options{})
		ctx := context.Background()
		key := b.keys.Stream(topic)
		// A member of an earlier process took the entry and died; the
		// entry was deleted before anyone ran it.
		if err := c.XGroupCreateMkStream(ctx, key, group, "0").Err(); err != nil {
			t.Fatal(err)
		}
		id, err := c.XAdd(ctx, &redis.XAddArgs{Stream: key, Values: []any{"x", "y"}}).Result()
		if err != nil {
			t.Fatal(err)
		}
		if err := c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: group, Consumer: "dead", Streams: []string{key, ">"}, Count: 1}).Err(); err != nil {
			t.Fatal(err)
		}
		if err := c.XDel(ctx, key, id).Err(); err != nil {
			t.Fatal(err)
		}
		ran := make(chan string, 1)
		sub, err := b.Subscribe(ctx, topic, func(_ context.Context, ev pubsub.Event) error {
			ran <- ev.ID
			return nil
		}, pubsub.Group(group), pubsub.StartFrom(pubsub.Earliest), pubsub.AckDeadline(100*time.Millisecond),
			pubsub.ExpireWhenDrained(ttl))
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = sub.Unsubscribe(context.Background()) }()
		awaitDrainedExpiry(t, c, key, group, d.FastForward, true, "the deleted entry's takeover")
		select {
		case id := <-ran:
			t.Fatalf("the deleted entry ran (%s)", id)
		default:
		}
		// The subscription is gone, the stream goes after its expiry.
		if err := sub.Unsubscribe(ctx); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(10 * time.Second); ; {
			n, err := c.Exists(ctx, key).Result()
			if err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the drained stream is still there 10s after its subscription left")
			}
			if d.FastForward != nil {
				d.FastForward(100 * time.Millisecond)
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}

// TestExpireWhenDrainedNackedGone: an entry nacked by a
// pubsub.ExpireWhenDrained subscription and deleted while it waits out its
// redelivery delay is dropped from the pending list by the claim that would
// have run it again (Redis 7), with no ack: the subscription then checks the
// stream and sets its drained expiry, as an ack would have.
func TestExpireWhenDrainedNackedGone(t *testing.T) {
	redistest.ForEachDeployment(t, func(t *testing.T, d *redistest.Deployed) {
		const (
			ttl   = 500 * time.Millisecond
			group = "owner"
			topic = "nacked"
		)
		c := d.NewClient(t)
		b := psBackend(t, c, Options{})
		ctx := context.Background()
		key := b.keys.Stream(topic)
		nacked := make(chan string, 4)
		sub, err := b.Subscribe(ctx, topic, func(_ context.Context, ev pubsub.Event) error {
			nacked <- ev.ID
			return fmt.Errorf("nack %s", ev.ID)
		}, pubsub.Group(group), pubsub.StartFrom(pubsub.Earliest), pubsub.RedeliveryDelay(time.Second),
			pubsub.ExpireWhenDrained(ttl))
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = sub.Unsubscribe(context.Background()) }()
		if err := b.PublishFor(ctx, topic, group, pubsub.Event{ID: "e1", Type: "t"}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-nacked:
		case <-time.After(10 * time.Second):
			t.Fatal("e1 not delivered within 10s")
		}
		// Deleted while it waits for its redelivery.
		ids, err := c.XRange(ctx, key, "-", "+").Result()
		if err != nil || len(ids) != 1 {
			t.Fatalf("XRANGE: %v %v", ids, err)
		}
		if err := c.XDel(ctx, key, ids[0].ID).Err(); err != nil {
			t.Fatal(err)
		}
		awaitDrainedExpiry(t, c, key, group, d.FastForward, false, "the nacked entry's deletion")
		select {
		case id := <-nacked:
			t.Fatalf("the deleted entry ran again (%s)", id)
		default:
		}
	})
}

// TestExpireWhenDrainedDeadLetterAck: the ack of an entry dead-lettered
// while the replicas did not acknowledge the dead letter goes outside the
// acker (ackIfDead, only while the dead letter is on the master); when it
// leaves a pubsub.ExpireWhenDrained subscription's stream drained, it sets
// the stream's expiry too.
func TestExpireWhenDrainedDeadLetterAck(t *testing.T) {
	st := redistest.StartSentinel(t, 1)
	b := psBackend(t, st.Client(t), Options{PublishSyncReplicas: 1, PublishSyncTimeout: 200 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	ctx := t.Context()
	master := st.Master().Client(t)
	const (
		topic = "expire-dead-ack"
		group = "g"
	)
	awaitSynced(t, b, topic)
	replica := replicaOf(t, st)
	var once sync.Once
	paused := make(chan struct{})
	sub, err := b.Subscribe(ctx, topic, func(ctx context.Context, ev pubsub.Event) error {
		once.Do(func() { replica.Pause(t); close(paused) })
		return errors.New("fails: dead-lettered (MaxDeliveries 1)")
	}, pubsub.Group(group), pubsub.MaxDeliveries(1), pubsub.ExpireWhenDrained(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe(context.Background()) }()
	if err := b.PublishFor(ctx, topic, group, pubsub.Event{ID: "e1", Type: "t"}); err != nil && !errors.Is(err, ErrNotReplicated) {
		t.Fatal(err)
	}
	select {
	case <-paused:
	case <-time.After(10 * time.Second):
		t.Fatal("e1 not run")
	}
	defer replica.Resume(t)
	key := b.keys.Stream(topic)
	awaitDrainedExpiry(t, master, key, group, nil, false, "the dead-lettered entry's ack")
}

// awaitDrainedExpiry waits up to 10s for stream key to have nothing pending
// in group and an expiry set (with goneOK, or to be gone: the expiry ran),
// moving fastForward's clock along when it is not nil; what names the
// step that should have set the expiry.
func awaitDrainedExpiry(t *testing.T, c redis.UniversalClient, key, group string, fastForward func(time.Duration), goneOK bool, what string) {
	t.Helper()
	ctx := context.Background()
	for deadline := time.Now().Add(10 * time.Second); ; {
		if goneOK {
			n, err := c.Exists(ctx, key).Result()
			if err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				return
			}
		}
		p, err := c.XPending(ctx, key, group).Result()
		if err != nil {
			t.Fatal(err)
		}
		ms, err := c.PTTL(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if p.Count == 0 && ms > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s left the drained stream with no expiry within 10s: pending %d, pttl %v", what, p.Count, ms)
		}
		if fastForward != nil {
			fastForward(50 * time.Millisecond)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
