package redisstreams

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// TestExpireWhenDrained: the ack that leaves a pubsub.ExpireWhenDrained
// subscription's stream drained sets the stream's expiry in the same step;
// a PublishFor removes it in the same step as its add, so an entry that is
// unread or pending keeps the stream past the expiry; once drained again
// the stream goes (what a killed signals runtime's lingering inboxes need:
// signals' TestKilledOwnerLeavesNoInbox). No expiry is set while another
// group is on the stream, and a script cache emptied under the acker
// (SCRIPT FLUSH, a restarted or promoted server) still gets it set.
func TestExpireWhenDrained(t *testing.T) {
	redistest.ForEachDeployment(t, func(t *testing.T, d *redistest.Deployed) {
		const ttl = 400 * time.Millisecond
		c := d.NewClient(t)
		b := psBackend(t, c, Options{})
		ctx := context.Background()
		const group = "owner"
		got := make(chan string, 16)
		holds := map[string]chan struct{}{"held": make(chan struct{}), "old": make(chan struct{})}
		var once sync.Once
		releaseAll := func() {
			once.Do(func() {
				for _, h := range holds {
					select {
					case <-h:
					default:
						close(h)
					}
				}
			})
		}
		release := func(id string) { close(holds[id]) }
		t.Cleanup(releaseAll) // before the Unsubscribes: registered first, run last
		handler := func(ctx context.Context, ev pubsub.Event) error {
			got <- ev.ID
			if h, ok := holds[ev.ID]; ok {
				<-h
			}
			return nil
		}
		subscribe := func(topic string) {
			sub, err := b.Subscribe(ctx, topic, handler, pubsub.Group(group), pubsub.StartFrom(pubsub.Earliest),
				pubsub.ExpireWhenDrained(ttl))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				releaseAll()
				_ = sub.Unsubscribe(context.Background())
			})
		}
		publish := func(topic, id string) {
			t.Helper()
			if err := b.PublishFor(ctx, topic, group, pubsub.Event{ID: id, Type: "t"}); err != nil {
				t.Fatal(err)
			}
		}
		expect := func(ids ...string) {
			t.Helper()
			for _, want := range ids {
				select {
				case id := <-got:
					if id != want {
						t.Fatalf("delivered %q, want %q", id, want)
					}
				case <-time.After(10 * time.Second):
					t.Fatalf("%q not delivered within 10s", want)
				}
			}
		}
		pttl := func(key string) time.Duration {
			t.Helper()
			v, err := c.PTTL(ctx, key).Result()
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
		pending := func(key string) int64 {
			t.Helper()
			p, err := c.XPending(ctx, key, group).Result()
			if err != nil {
				t.Fatal(err)
			}
			return p.Count
		}
		// waitFor polls cond for 10s (moving a fake server clock along).
		waitFor := func(what string, cond func() bool) {
			t.Helper()
			for deadline := time.Now().Add(10 * time.Second); !cond(); {
				if time.Now().After(deadline) {
					t.Fatalf("%s: not within 10s", what)
				}
				if d.FastForward != nil {
					d.FastForward(50 * time.Millisecond)
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
		exists := func(key string) bool {
			t.Helper()
			n, err := c.Exists(ctx, key).Result()
			if err != nil {
				t.Fatal(err)
			}
			return n == 1
		}

		topic := "inbox"
		key := b.keys.Stream(topic)
		subscribe(topic)
		publish(topic, "e1")
		publish(topic, "e2")
		expect("e1", "e2")
		waitFor("expiry set by the ack that drained the stream", func() bool { return pttl(key) > 0 })
		if v := pttl(key); v > ttl {
			t.Fatalf("PTTL %v, want at most %v", v, ttl)
		}

		publish(topic, "held")
		if v := pttl(key); v != -1 {
			t.Fatalf("PTTL %v right after PublishFor returned, want -1 (no expiry)", v)
		}
		expect("held")
		// Pending past the expiry the stream had: still there.
		if d.FastForward != nil {
			d.FastForward(2 * ttl)
		} else {
			time.Sleep(2 * ttl)
		}
		if !exists(key) || pending(key) != 1 {
			t.Fatalf("stream with a pending entry: exists %t; want it kept, with the entry pending", exists(key))
		}
		release("held")
		waitFor("stream gone after its last ack and the expiry", func() bool { return !exists(key) })

		// A signal after the deletion starts the stream afresh and is
		// delivered to the subscription still subscribed.
		publish(topic, "after")
		expect("after")

		// A publisher whose PublishFor did not remove the expiry (a
		// process of an earlier version, in a rolling upgrade): a plain
		// XADD. The read that returns its entry removes the expiry, so
		// the entry is not deleted with the stream while it is pending.
		waitFor("expiry set again", func() bool { return pttl(key) > 0 })
		fields, err := b.encodeFor(topic, pubsub.Event{ID: "old", Type: "t"})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.XAdd(ctx, &redis.XAddArgs{Stream: key, Values: fields}).Err(); err != nil {
			t.Fatal(err)
		}
		expect("old")
		if d.FastForward != nil {
			d.FastForward(2 * ttl)
		} else {
			time.Sleep(2 * ttl)
		}
		if !exists(key) || pending(key) != 1 {
			t.Fatalf("stream with an entry read pending: exists %t; want it kept, with the entry pending", exists(key))
		}
		release("old")
		waitFor("stream gone after the old publisher's entry was acked", func() bool { return !exists(key) })

		// Another group on the stream: drained for the subscription's
		// group, but not the only group: no expiry.
		other := "shared"
		okey := b.keys.Stream(other)
		subscribe(other)
		publish(other, "s1")
		if err := c.XGroupCreate(ctx, okey, "someone-else", "$").Err(); err != nil {
			t.Fatal(err)
		}
		publish(other, "s2")
		expect("s1", "s2")
		waitFor("acks written", func() bool { return pending(okey) == 0 })
		if v := pttl(okey); v != -1 {
			t.Fatalf("PTTL %v of a stream with another group, want -1", v)
		}

		// An emptied script cache: the ack is sent again as EVAL.
		flushed := "flushed"
		fkey := b.keys.Stream(flushed)
		subscribe(flushed)
		publish(flushed, "f1")
		expect("f1")
		waitFor("expiry set", func() bool { return pttl(fkey) > 0 })
		publish(flushed, "f2")
		flushScripts(t, c)
		expect("f2")
		waitFor("expiry set after SCRIPT FLUSH", func() bool { return pttl(fkey) > 0 })
	})
}

// flushScripts empties the script cache of every master c talks to.
func flushScripts(t *testing.T, c redis.UniversalClient) {
	t.Helper()
	ctx := context.Background()
	if cc, ok := c.(*redis.ClusterClient); ok {
		if err := cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			return m.ScriptFlush(ctx).Err()
		}); err != nil {
			t.Fatal(err)
		}
		return
	}
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
}
