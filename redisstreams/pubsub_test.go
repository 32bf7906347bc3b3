package redisstreams

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
	"github.com/leasebus/leasebus/pubsub/pubsubtest"
)

var psPrefixSeq atomic.Int64

// psPrefix returns a key prefix no other test uses.
func psPrefix() string { return fmt.Sprintf("pstest%d", psPrefixSeq.Add(1)) }

// psBackend returns a Backend on c with o (a fresh Prefix when empty),
// closed at cleanup.
func psBackend(t testing.TB, c redis.UniversalClient, o Options) *Backend {
	t.Helper()
	if o.Prefix == "" {
		o.Prefix = psPrefix()
	}
	b, err := New(c, o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// urlBackend returns a Backend from NewURL(url, o), as a user builds one
// (go-redis's default client options), with a fresh Prefix when o has
// none, closed at cleanup.
func urlBackend(t testing.TB, url string, o Options) *Backend {
	t.Helper()
	if o.Prefix == "" {
		o.Prefix = psPrefix()
	}
	b, err := NewURL(t.Context(), url, o)
	if err != nil {
		t.Fatalf("NewURL(%s): %v", url, err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// psPeer returns the NewPeer of the suite: a second Backend with the same
// options on a second client of the same deployment (another process's
// view).
func psPeer(newClient func(t testing.TB) redis.UniversalClient) func(t *testing.T, ps pubsub.PubSub) pubsub.PubSub {
	return func(t *testing.T, ps pubsub.PubSub) pubsub.PubSub {
		o := ps.(*Backend).opts
		o.Consumer = ""
		return psBackend(t, newClient(t), o)
	}
}

// TestPubSubConformance runs the pubsub suite on every deployment of
// redistest.Deployments: a private redis-server, a 3-master Cluster, a
// Sentinel deployment through failover clients, and miniredis (which lacks
// CLIENT ID and CLIENT UNBLOCK: the readers poll instead). Each Backend gets
// a client of its own.
func TestPubSubConformance(t *testing.T) {
	redistest.ForEachDeployment(t, func(t *testing.T, d *redistest.Deployed) {
		pubsubtest.Run(t, pubsubtest.Config{
			New: func(t *testing.T) pubsub.PubSub {
				return psBackend(t, d.NewClient(t), Options{BlockTime: 500 * time.Millisecond})
			},
			NewWithRetention: func(t *testing.T, retention int) pubsub.PubSub {
				return psBackend(t, d.NewClient(t), Options{BlockTime: 500 * time.Millisecond, Retention: retention})
			},
			NewPeer: psPeer(d.NewClient),
			Features: pubsubtest.Features{
				ConsumerGroups: true,
				AckDeadline:    true,
				Persistent:     true,
			},
		})
	})
}

func TestPublishRejectsOversizeEvent(t *testing.T) {
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { c.Close() })
	b := psBackend(t, c, Options{MaxEventSize: 1024})
	err := b.Publish(t.Context(), "big", pubsub.Event{Type: "t", Data: []byte(`"` + strings.Repeat("x", 2000) + `"`)})
	if !errors.Is(err, pubsub.ErrInvalid) {
		t.Fatalf("Publish of a 2KB event with MaxEventSize 1024: got %v, want pubsub.ErrInvalid", err)
	}
	if !strings.Contains(err.Error(), "1024") || !strings.Contains(err.Error(), "bytes") {
		t.Errorf("error %q does not name the size and the limit", err)
	}
	if n := m.Keys(); len(n) != 0 {
		t.Errorf("keys after rejected publish: %v, want none", n)
	}
}

func TestPublishInvalidMetadata(t *testing.T) {
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { c.Close() })
	b := psBackend(t, c, Options{})
	err := b.Publish(t.Context(), "t", pubsub.Event{Type: "t", Metadata: map[string]string{"k": "\xff"}})
	if !errors.Is(err, pubsub.ErrInvalid) {
		t.Fatalf("Publish with non-UTF-8 metadata: got %v, want pubsub.ErrInvalid", err)
	}
}

func TestPubSubNewURLInvalid(t *testing.T) {
	_, err := NewURL(t.Context(), "not a url", Options{})
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("NewURL(%q): got %v, want ErrInvalid", "not a url", err)
	}
}

func TestPubSubNewURLClosedPortNoHang(t *testing.T) {
	m := miniredis.RunT(t)
	addr := m.Addr()
	m.Close() // the port is now closed
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	start := time.Now()
	b, err := NewURL(ctx, "redis://"+addr, Options{})
	if err == nil {
		b.Close()
		t.Fatal("NewURL to a closed port succeeded")
	}
	if d := time.Since(start); d >= 2*time.Second {
		t.Fatalf("NewURL to a closed port took %v, want an error before the 2s deadline", d)
	}
}

// TestPubSubStreamLayout checks the stream fields a publish writes and that
// Retention and the idle TTL apply.
func TestPubSubStreamLayout(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	c := srv.Client(t)
	b := psBackend(t, c, Options{Retention: 10, StreamIdleTTL: time.Minute})
	ctx := t.Context()
	for i := range 200 {
		if err := b.Publish(ctx, "layout", pubsub.Event{ID: fmt.Sprint(i), Type: "t", RunID: "r", Data: []byte(`1`)}); err != nil {
			t.Fatalf("Publish: %v", err)
		}
	}
	key := b.keys.Stream("layout")
	n, err := c.XLen(ctx, key).Result()
	if err != nil || n > 120 {
		t.Errorf("XLEN after 200 publishes with Retention 10 = %d, %v; want trimmed", n, err)
	}
	ttl, err := c.PTTL(ctx, key).Result()
	if err != nil || ttl <= 0 || ttl > time.Minute {
		t.Errorf("PTTL = %v, %v; want in (0, 1m]", ttl, err)
	}
	msgs, err := c.XRevRangeN(ctx, key, "+", "-", 1).Result()
	if err != nil || len(msgs) != 1 {
		t.Fatalf("XREVRANGE: %v %v", msgs, err)
	}
	v := msgs[0].Values
	if v["v"] != "1" || v["id"] != "199" || v["type"] != "t" || v["run"] != "r" || v["data"] != "1" || v["created"] == nil {
		t.Errorf("fields %v, want v=1 id=199 type=t run=r data=1 created", v)
	}
}

// TestPubSubSharedFanOutReader checks that many fan-out subscriptions of
// one Backend share one blocking connection, and that a subscription added
// while the reader blocks is served at once (CLIENT UNBLOCK).
func TestPubSubSharedFanOutReader(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	c := srv.Client(t)
	b := psBackend(t, c, Options{BlockTime: 30 * time.Second})
	ctx := t.Context()
	const topics = 20
	got := make(chan string, topics)
	var subs []pubsub.Subscription
	for i := range topics {
		topic := fmt.Sprintf("shared.%d", i)
		sub, err := b.Subscribe(ctx, topic, func(_ context.Context, e pubsub.Event) error {
			got <- e.ID
			return nil
		})
		if err != nil {
			t.Fatalf("Subscribe: %v", err)
		}
		subs = append(subs, sub)
		time.Sleep(5 * time.Millisecond) // let the reader block between subscribes
	}
	start := time.Now()
	for i := range topics {
		if err := b.Publish(ctx, fmt.Sprintf("shared.%d", i), pubsub.Event{ID: fmt.Sprint(i), Type: "t"}); err != nil {
			t.Fatalf("Publish: %v", err)
		}
	}
	for range topics {
		select {
		case <-got:
		case <-time.After(5 * time.Second):
			t.Fatal("a fan-out delivery did not arrive within 5s (BlockTime is 30s: the reader was not woken)")
		}
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("deliveries took %v", d)
	}
	clients, err := c.ClientList(ctx).Result()
	if err != nil {
		t.Fatalf("CLIENT LIST: %v", err)
	}
	blocked := strings.Count(clients, "cmd=xread ")
	if blocked > 1 {
		t.Errorf("%d connections in XREAD for %d fan-out subscriptions, want 1:\n%s", blocked, topics, clients)
	}
	// Unsubscribe returns promptly even though the reader blocks for 30s.
	for _, sub := range subs {
		uctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		if err := sub.Unsubscribe(uctx); err != nil {
			t.Errorf("Unsubscribe: %v", err)
		}
		cancel()
	}
	cctx := time.Now()
	if err := b.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if d := time.Since(cctx); d > 2*time.Second {
		t.Errorf("Close took %v with a 30s BlockTime", d)
	}
}

// TestPublishCoalesces checks that concurrent publishes share pipelines.
func TestPublishCoalesces(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	c := srv.Client(t)
	var pipes, cmds atomic.Int64
	c.AddHook(&redistest.RoundTrips{Observe: func(_ context.Context, cs []redis.Cmder, pipeline bool) {
		switch {
		case !pipeline:
			cmds.Add(1)
		case cs[0].Name() == "xadd":
			pipes.Add(1)
		}
	}})
	b := psBackend(t, c, Options{})
	ctx := t.Context()
	const n = 2000
	errs := make(chan error, n)
	for i := range n {
		go func() { errs <- b.Publish(ctx, "coalesce", pubsub.Event{ID: fmt.Sprint(i), Type: "t"}) }()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatalf("Publish: %v", err)
		}
	}
	if got, err := c.XLen(ctx, b.keys.Stream("coalesce")).Result(); err != nil || got != n {
		t.Fatalf("XLEN = %d, %v; want %d", got, err, n)
	}
	if p := pipes.Load(); p >= n/4 {
		t.Errorf("%d publishes took %d pipelines, want far fewer", n, p)
	}
	t.Logf("%d publishes in %d pipelines (%d single commands)", n, pipes.Load(), cmds.Load())
}

// TestPubSubGroupAckWrittenOnClose checks that Close writes the acks of
// handlers that returned nil and deletes the consumer, which has nothing
// pending.
func TestPubSubGroupAckWrittenOnClose(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	c := srv.Client(t)
	b := psBackend(t, c, Options{})
	ctx := t.Context()
	handled := make(chan struct{}, 100)
	if _, err := b.Subscribe(ctx, "acks", func(context.Context, pubsub.Event) error {
		handled <- struct{}{}
		return nil
	}, pubsub.Group("g")); err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	for range 50 {
		if err := b.Publish(ctx, "acks", pubsub.Event{Type: "t"}); err != nil {
			t.Fatalf("Publish: %v", err)
		}
	}
	for range 50 {
		select {
		case <-handled:
		case <-time.After(10 * time.Second):
			t.Fatal("handler not called")
		}
	}
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	key := b.keys.Stream("acks")
	p, err := c.XPending(ctx, key, "g").Result()
	if err != nil || p.Count != 0 {
		t.Errorf("XPENDING after Close = %+v, %v; want nothing pending", p, err)
	}
	cons, err := c.XInfoConsumers(ctx, key, "g").Result()
	if err != nil || len(cons) != 0 {
		t.Errorf("consumers after Close = %+v, %v; want none (deleted on unsubscribe)", cons, err)
	}
}
