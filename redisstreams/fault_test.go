package redisstreams

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// faultRecorder records deliveries by event ID.
type faultRecorder struct {
	mu     sync.Mutex
	got    map[string][]int // id → delivery attempts seen
	notify chan struct{}
}

func newFaultRecorder() *faultRecorder {
	return &faultRecorder{got: make(map[string][]int), notify: make(chan struct{}, 1)}
}

func (r *faultRecorder) handler(_ context.Context, e pubsub.Event) error {
	r.mu.Lock()
	r.got[e.ID] = append(r.got[e.ID], e.DeliveryAttempt)
	r.mu.Unlock()
	select {
	case r.notify <- struct{}{}:
	default:
	}
	return nil
}

func (r *faultRecorder) has(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.got[id]) > 0
}

// waitFor waits until every id was delivered, failing after d.
func (r *faultRecorder) waitFor(t *testing.T, d time.Duration, ids ...string) {
	t.Helper()
	deadline := time.After(d)
	for {
		missing := 0
		for _, id := range ids {
			if !r.has(id) {
				missing++
			}
		}
		if missing == 0 {
			return
		}
		select {
		case <-r.notify:
		case <-time.After(10 * time.Millisecond):
		case <-deadline:
			t.Fatalf("%d of %d events not delivered within %v", missing, len(ids), d)
		}
	}
}

// faultPublish publishes until it succeeds (the server may be coming back).
func faultPublish(t *testing.T, b *Backend, topic string, e pubsub.Event) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := b.Publish(ctx, topic, e)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Publish(%q) kept failing: %v", e.ID, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func faultSubscribe(t *testing.T, b *Backend, topic string, h pubsub.Handler, opts ...pubsub.SubscribeOption) pubsub.Subscription {
	t.Helper()
	sub, err := b.Subscribe(t.Context(), topic, h, opts...)
	if err != nil {
		t.Fatalf("Subscribe(%q): %v", topic, err)
	}
	return sub
}

// TestFaultRedisRestart restarts Redis (with its AOF) under a live fan-out
// and a live group subscriber: events published after the restart arrive.
func TestFaultRedisRestart(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{AppendOnly: true})
	b := psBackend(t, srv.Client(t), Options{BlockTime: 300 * time.Millisecond})
	fan, grp := newFaultRecorder(), newFaultRecorder()
	faultSubscribe(t, b, "restart", fan.handler)
	faultSubscribe(t, b, "restart", grp.handler, pubsub.Group("g"))
	faultPublish(t, b, "restart", pubsub.Event{ID: "before", Type: "t"})
	fan.waitFor(t, 10*time.Second, "before")
	grp.waitFor(t, 10*time.Second, "before")

	srv.Kill(t)
	time.Sleep(200 * time.Millisecond) // let the readers see the failure
	srv.Restart(t)

	faultPublish(t, b, "restart", pubsub.Event{ID: "after", Type: "t"})
	fan.waitFor(t, 15*time.Second, "after")
	grp.waitFor(t, 15*time.Second, "after")
}

// TestFaultRedisRestartWithoutData restarts Redis without persistence: the
// group is gone (NOGROUP) and is recreated; the fan-out reader starts the
// new stream from 0.
func TestFaultRedisRestartWithoutData(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	b := psBackend(t, srv.Client(t), Options{BlockTime: 300 * time.Millisecond})
	fan, grp := newFaultRecorder(), newFaultRecorder()
	faultSubscribe(t, b, "wiped", fan.handler)
	faultSubscribe(t, b, "wiped", grp.handler, pubsub.Group("g"))
	faultPublish(t, b, "wiped", pubsub.Event{ID: "before", Type: "t"})
	fan.waitFor(t, 10*time.Second, "before")
	grp.waitFor(t, 10*time.Second, "before")

	srv.Stop(t)
	time.Sleep(200 * time.Millisecond)
	srv.Restart(t)
	time.Sleep(800 * time.Millisecond) // the group is recreated when its reader sees NOGROUP

	faultPublish(t, b, "wiped", pubsub.Event{ID: "after", Type: "t"})
	fan.waitFor(t, 15*time.Second, "after")
	grp.waitFor(t, 15*time.Second, "after")
}

// TestFaultProxyCut severs every connection repeatedly while 1,000 events
// are published: each event whose Publish returned nil reaches the group at
// least once, and no event is delivered again as new (attempt 1) after its
// handler acked it.
func TestFaultProxyCut(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	proxy := redistest.NewProxy(t, srv.Addr())
	// No client retries: a retried pipeline could store an event twice,
	// which would be a publish duplicate, not a consumer redelivery.
	c := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { c.Close() })
	b := psBackend(t, c, Options{BlockTime: 200 * time.Millisecond, BatchSize: 32})

	var (
		mu        sync.Mutex
		acked     = map[string]bool{}
		seen      = map[string]bool{}
		asNew     []string
		delivered = make(chan struct{}, 1)
	)
	faultSubscribe(t, b, "cut", func(_ context.Context, e pubsub.Event) error {
		mu.Lock()
		defer mu.Unlock()
		if acked[e.ID] && e.DeliveryAttempt == 1 {
			asNew = append(asNew, e.ID)
		}
		acked[e.ID] = true
		seen[e.ID] = true
		select {
		case delivered <- struct{}{}:
		default:
		}
		return nil
	}, pubsub.Group("g"), pubsub.AckDeadline(time.Second))

	const n = 1000
	stop := make(chan struct{})
	var cutter sync.WaitGroup
	cutter.Add(1)
	go func() {
		defer cutter.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
				proxy.CutAll()
			}
		}
	}()
	var (
		okIDs []string
		pmu   sync.Mutex
		pwg   sync.WaitGroup
	)
	for w := range 8 {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			for i := w; i < n; i += 8 {
				id := fmt.Sprintf("e%04d", i)
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				err := b.Publish(ctx, "cut", pubsub.Event{ID: id, Type: "t"})
				cancel()
				if err == nil {
					pmu.Lock()
					okIDs = append(okIDs, id)
					pmu.Unlock()
				}
			}
		}()
	}
	pubStart := time.Now()
	pwg.Wait()
	close(stop)
	cutter.Wait()
	t.Logf("publishing under cuts took %v", time.Since(pubStart))
	if len(okIDs) < n/4 {
		t.Fatalf("only %d of %d publishes succeeded", len(okIDs), n)
	}

	deadline := time.After(30 * time.Second)
	for {
		mu.Lock()
		missing := 0
		for _, id := range okIDs {
			if !seen[id] {
				missing++
			}
		}
		mu.Unlock()
		if missing == 0 {
			break
		}
		select {
		case <-delivered:
		case <-time.After(100 * time.Millisecond):
		case <-deadline:
			t.Fatalf("%d of %d successfully published events never delivered", missing, len(okIDs))
		}
	}
	// Let redeliveries of entries whose XACK was cut settle.
	time.Sleep(1500 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if len(asNew) > 0 {
		t.Errorf("%d acked events were delivered again as new (attempt 1): %v", len(asNew), asNew[:min(len(asNew), 10)])
	}
	t.Logf("%d of %d publishes succeeded under cuts; all delivered", len(okIDs), n)
}

// TestFaultStreamDeleted deletes the stream under a fan-out and a group
// reader; events published afterwards are still received.
func TestFaultStreamDeleted(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	c := srv.Client(t)
	b := psBackend(t, c, Options{BlockTime: 200 * time.Millisecond})
	fan, grp := newFaultRecorder(), newFaultRecorder()
	faultSubscribe(t, b, "deleted", fan.handler)
	faultSubscribe(t, b, "deleted", grp.handler, pubsub.Group("g"))
	faultPublish(t, b, "deleted", pubsub.Event{ID: "one", Type: "t"})
	fan.waitFor(t, 10*time.Second, "one")
	grp.waitFor(t, 10*time.Second, "one")

	if err := c.Del(t.Context(), b.keys.Stream("deleted")).Err(); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	time.Sleep(500 * time.Millisecond) // readers notice (NOGROUP, missing stream)
	faultPublish(t, b, "deleted", pubsub.Event{ID: "two", Type: "t"})
	fan.waitFor(t, 10*time.Second, "two")
	grp.waitFor(t, 10*time.Second, "two")
}

// TestFaultConsumerDeath: a member whose handler never acks goes away; the
// other member gets the event after AckDeadline with DeliveryAttempt 2.
func TestFaultConsumerDeath(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	dying := psBackend(t, srv.Client(t), Options{})
	prefix := dying.opts.Prefix
	heirB := psBackend(t, srv.Client(t), Options{Prefix: prefix})

	entered := make(chan struct{}, 1)
	faultSubscribe(t, dying, "death", func(ctx context.Context, e pubsub.Event) error {
		entered <- struct{}{}
		<-ctx.Done() // blocks until the subscription is abandoned; never acks
		return ctx.Err()
	}, pubsub.Group("g"), pubsub.AckDeadline(400*time.Millisecond))
	faultPublish(t, heirB, "death", pubsub.Event{ID: "orphan", Type: "t"})
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("first delivery never came")
	}
	heir := newFaultRecorder()
	faultSubscribe(t, heirB, "death", heir.handler, pubsub.Group("g"), pubsub.AckDeadline(400*time.Millisecond))
	start := time.Now()
	if err := dying.Close(); err != nil {
		t.Fatalf("Close of the dying backend: %v", err)
	}
	heir.waitFor(t, 10*time.Second, "orphan")
	heir.mu.Lock()
	defer heir.mu.Unlock()
	if got := heir.got["orphan"]; len(got) != 1 || got[0] != 2 {
		t.Errorf("heir saw attempts %v, want [2]", got)
	}
	t.Logf("taken over %v after the member went away", time.Since(start))
}

// TestFaultPoisonEntry writes an entry with plain XADD, as redis-cli would:
// it lands in <topic>.dead with its raw fields and the reason, and the next
// good event is still delivered, to the group and to a fan-out subscriber.
func TestFaultPoisonEntry(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	c := srv.Client(t)
	b := psBackend(t, c, Options{})
	grp, fan, dead := newFaultRecorder(), newFaultRecorder(), newFaultRecorder()
	var deadEvents sync.Map
	faultSubscribe(t, b, "poison.dead", func(ctx context.Context, e pubsub.Event) error {
		deadEvents.Store(e.ID, e)
		return dead.handler(ctx, e)
	}, pubsub.Group("inspect"))
	faultSubscribe(t, b, "poison", grp.handler, pubsub.Group("g"))
	faultSubscribe(t, b, "poison", fan.handler)

	id, err := c.XAdd(t.Context(), &redis.XAddArgs{Stream: b.keys.Stream("poison"), Values: []string{"foo", "bar"}}).Result()
	if err != nil {
		t.Fatalf("XADD: %v", err)
	}
	faultPublish(t, b, "poison", pubsub.Event{ID: "good", Type: "t"})
	grp.waitFor(t, 10*time.Second, "good")
	fan.waitFor(t, 10*time.Second, "good")
	dead.waitFor(t, 10*time.Second, "undecodable:"+id)
	v, _ := deadEvents.Load("undecodable:" + id)
	de := v.(pubsub.Event)
	var raw map[string]string
	if err := json.Unmarshal(de.Data, &raw); err != nil || raw["foo"] != "bar" {
		t.Errorf("dead letter data %s (%v), want the raw fields {foo: bar}", de.Data, err)
	}
	if de.Metadata[pubsub.MetaDeadReason] == "" || de.Metadata[pubsub.MetaDeadTopic] != "poison" {
		t.Errorf("dead letter metadata %v, want reason and topic", de.Metadata)
	}
	// The poison entry is acked on the group.
	deadline := time.Now().Add(5 * time.Second)
	for {
		p, err := c.XPending(t.Context(), b.keys.Stream("poison"), "g").Result()
		if err == nil && p.Count == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("XPENDING = %+v, %v; want the poison entry acked", p, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestFaultCloseWritesAck: Close right after a handler returned nil leaves
// nothing pending on the server.
func TestFaultCloseWritesAck(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	c := srv.Client(t)
	b := psBackend(t, c, Options{})
	handled := make(chan struct{})
	faultSubscribe(t, b, "closeack", func(context.Context, pubsub.Event) error {
		close(handled)
		return nil
	}, pubsub.Group("g"))
	faultPublish(t, b, "closeack", pubsub.Event{ID: "x", Type: "t"})
	<-handled
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	p, err := c.XPending(t.Context(), b.keys.Stream("closeack"), "g").Result()
	if err != nil || p.Count != 0 {
		t.Fatalf("XPENDING after Close = %+v, %v; want empty", p, err)
	}
}
