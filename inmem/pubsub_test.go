package inmem

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasebus/leasebus/pubsub"
	"github.com/leasebus/leasebus/pubsub/pubsubtest"
)

func TestPubSub(t *testing.T) {
	pubsubtest.Run(t, pubsubtest.Config{
		New: func(*testing.T) pubsub.PubSub { return New() },
		NewWithRetention: func(t *testing.T, retention int) pubsub.PubSub {
			b, err := NewWithOptions(Options{Retention: retention})
			if err != nil {
				t.Fatal(err)
			}
			return b
		},
		// One process: the peer is the backend itself.
		NewPeer: func(_ *testing.T, ps pubsub.PubSub) pubsub.PubSub { return ps },
		Features: pubsubtest.Features{
			ConsumerGroups: true,
			AckDeadline:    true,
			Persistent:     true,
			TimePrecision:  0, // events are kept as they are
		},
	})
}

const testTimeout = 10 * time.Second

func waitFor[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(testTimeout):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

func mustSubscribe(t *testing.T, b *Backend, topic string, h pubsub.Handler, opts ...pubsub.SubscribeOption) pubsub.Subscription {
	t.Helper()
	sub, err := b.Subscribe(context.Background(), topic, h, opts...)
	if err != nil {
		t.Fatalf("Subscribe(%q): %v", topic, err)
	}
	return sub
}

func mustPublish(t *testing.T, b *Backend, topic string, e pubsub.Event) {
	t.Helper()
	if err := b.Publish(context.Background(), topic, e); err != nil {
		t.Fatalf("Publish(%q): %v", topic, err)
	}
}

func mustFlush(t *testing.T, b *Backend) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if err := b.Flush(ctx); err != nil {
		t.Fatalf("Flush: %v", err)
	}
}

// Ack deadlines are read from the Backend's Clock: an hour-long deadline
// passes when a ManualClock is moved two hours on.
func TestAckDeadlineFollowsClock(t *testing.T) {
	clock := NewManualClock(time.Unix(1_700_000_000, 0))
	b, err := NewWithOptions(Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	stuck := make(chan string, 1)
	again := make(chan pubsub.Event, 1)
	h := func(member string) pubsub.Handler {
		return func(ctx context.Context, e pubsub.Event) error {
			if e.DeliveryAttempt == 1 {
				stuck <- member
				<-ctx.Done()
				return ctx.Err()
			}
			again <- e
			return nil
		}
	}
	opts := []pubsub.SubscribeOption{pubsub.Group("g"), pubsub.AckDeadline(time.Hour)}
	mustSubscribe(t, b, "jobs", h("a"), opts...)
	mustSubscribe(t, b, "jobs", h("b"), opts...)
	mustPublish(t, b, "jobs", pubsub.Event{Type: "job"})
	waitFor(t, stuck, "the first delivery")
	clock.Advance(2 * time.Hour)
	if e := waitFor(t, again, "the redelivery"); e.DeliveryAttempt != 2 {
		t.Errorf("redelivery has attempt %d, want 2", e.DeliveryAttempt)
	}
}

func retained(b *Backend, name string) (n int, ok bool) {
	b.bus.mu.Lock()
	defer b.bus.mu.Unlock()
	tp := b.bus.topics[name]
	if tp == nil {
		return 0, false
	}
	tp.mu.Lock()
	defer tp.mu.Unlock()
	return len(tp.events), true
}

// The log keeps every event a group without members still has to read, and
// trims to about Retention once every reader is past.
func TestLogKeepsWhatReadersNeedAndNoMore(t *testing.T) {
	const retainPerTopic = 1024
	const n = 5 * retainPerTopic
	b, err := NewWithOptions(Options{Retention: retainPerTopic})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	var fan atomic.Int64
	mustSubscribe(t, b, "log", func(context.Context, pubsub.Event) error { fan.Add(1); return nil })
	sub := mustSubscribe(t, b, "log", func(context.Context, pubsub.Event) error { return nil }, pubsub.Group("g"))
	if err := sub.Unsubscribe(ctx); err != nil {
		t.Fatal(err)
	}
	for range n {
		mustPublish(t, b, "log", pubsub.Event{Type: "e"})
	}
	mustFlush(t, b)
	if got, _ := retained(b, "log"); got != n {
		t.Fatalf("%d events retained, want all %d: the group has not read them", got, n)
	}

	var group atomic.Int64
	mustSubscribe(t, b, "log", func(context.Context, pubsub.Event) error { group.Add(1); return nil }, pubsub.Group("g"))
	mustFlush(t, b)
	if got := group.Load(); got != n {
		t.Fatalf("returning group member got %d events, want %d", got, n)
	}
	for range retainPerTopic + 1 {
		mustPublish(t, b, "log", pubsub.Event{Type: "e"})
	}
	mustFlush(t, b)
	if got, _ := retained(b, "log"); got > 2*retainPerTopic {
		t.Errorf("%d events retained after every reader caught up, want at most %d", got, 2*retainPerTopic)
	}
	if got := fan.Load(); got != n+retainPerTopic+1 {
		t.Errorf("fan-out subscriber got %d events, want %d", got, n+retainPerTopic+1)
	}

	var early atomic.Int64
	mustSubscribe(t, b, "log", func(context.Context, pubsub.Event) error { early.Add(1); return nil },
		pubsub.StartFrom(pubsub.Earliest))
	mustFlush(t, b)
	if got := early.Load(); got < retainPerTopic {
		t.Errorf("StartFrom(Earliest) replayed %d events, want at least %d", got, retainPerTopic)
	}
}

// A topic nobody subscribes to is forgotten after DefaultTopicIdleTTL; one with a
// subscription is kept.
func TestIdleTopicsAreForgotten(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := New()
		defer b.Close()
		mustPublish(t, b, "idle", pubsub.Event{Type: "e"})
		sub := mustSubscribe(t, b, "watched", func(context.Context, pubsub.Event) error { return nil })
		defer sub.Unsubscribe(context.Background())
		time.Sleep(DefaultTopicIdleTTL + sweepEvery)
		mustPublish(t, b, "other", pubsub.Event{Type: "e"}) // sweeps
		if _, ok := retained(b, "idle"); ok {
			t.Error("idle topic still kept")
		}
		if _, ok := retained(b, "watched"); !ok {
			t.Error("topic with a subscription was forgotten")
		}
	})
}

// Each delivery is a copy: neither the publisher nor another handler can
// change what a handler sees.
func TestDeliveriesAreCopies(t *testing.T) {
	b := New()
	defer b.Close()
	var mu sync.Mutex
	var seen []string
	record := func(ctx context.Context, e pubsub.Event) error {
		mu.Lock()
		seen = append(seen, string(e.Data)+e.Metadata["k"])
		mu.Unlock()
		e.Data[0] = 'X'
		e.Metadata["k"] = "changed"
		return nil
	}
	mustSubscribe(t, b, "copies", record)
	mustSubscribe(t, b, "copies", record)
	data := json.RawMessage(`"v"`)
	meta := map[string]string{"k": "v"}
	mustPublish(t, b, "copies", pubsub.Event{Type: "e", Data: data, Metadata: meta})
	data[0] = 'Y'
	meta["k"] = "publisher"
	mustFlush(t, b)
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(seen) != `["v"v "v"v]` {
		t.Errorf("handlers saw %q, want the event as published twice", seen)
	}
}

// Close while publishers and subscribers churn: every call either works or
// returns ErrClosed, and nothing is left running (goleak in TestMain).
func TestCloseUnderLoad(t *testing.T) {
	b := New()
	defer b.Close()
	var handled atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	stop := make(chan struct{})
	for p := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				err := b.Publish(context.Background(), fmt.Sprint("load.", p%2), pubsub.Event{Type: "e"})
				if errors.Is(err, pubsub.ErrClosed) {
					return
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	for c := range 2 {
		wg.Go(func() {
			for {
				sub, err := b.Subscribe(context.Background(), fmt.Sprint("load.", c), func(context.Context, pubsub.Event) error {
					handled.Add(1)
					return nil
				}, pubsub.Group("g"), pubsub.Concurrency(2))
				if errors.Is(err, pubsub.ErrClosed) {
					return
				}
				if err != nil {
					errs <- err
					return
				}
				select {
				case <-stop:
				case <-time.After(time.Millisecond):
				}
				if err := sub.Unsubscribe(context.Background()); err != nil && !errors.Is(err, pubsub.ErrClosed) {
					errs <- err
					return
				}
			}
		})
	}
	for deadline := time.Now().Add(testTimeout); handled.Load() < 100; {
		if time.Now().After(deadline) {
			t.Fatalf("only %d events handled within %v", handled.Load(), testTimeout)
		}
		time.Sleep(time.Millisecond) // polling a counter, not an assertion
	}
	close(stop)
	if err := b.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("during Close: %v", err)
	}
	if err := b.Flush(context.Background()); !errors.Is(err, pubsub.ErrClosed) {
		t.Errorf("Flush after Close: %v, want ErrClosed", err)
	}
}

func BenchmarkPublish(b *testing.B) {
	ps := New()
	defer ps.Close()
	pubsubtest.BenchPublish(b, ps)
}

func BenchmarkEndToEnd(b *testing.B) {
	for _, p := range []int{1, 4} {
		b.Run(fmt.Sprintf("publishers=%d", p), func(b *testing.B) {
			ps := New()
			defer ps.Close()
			pubsubtest.BenchEndToEnd(b, ps, p)
		})
	}
}

// A ClaimPending member takes over everything of its group that is not
// acked, including what an earlier ClaimPending member claimed and has not
// started yet, and receives it in publish order.
func TestClaimPendingTakesFromEarlierClaimer(t *testing.T) {
	b := New()
	defer b.Close()
	ctx := context.Background()
	opts := []pubsub.SubscribeOption{pubsub.Group("g"), pubsub.AckDeadline(time.Hour)}
	block := func(entered chan<- int) pubsub.Handler {
		return func(ctx context.Context, e pubsub.Event) error {
			var v struct{ N int }
			_ = json.Unmarshal(e.Data, &v)
			entered <- v.N
			<-ctx.Done()
			return ctx.Err()
		}
	}
	first := make(chan int, 3)
	a := mustSubscribe(t, b, "t", block(first), append(opts, pubsub.Concurrency(3))...)
	defer a.Unsubscribe(ctx)
	for n := 1; n <= 3; n++ {
		mustPublish(t, b, "t", pubsub.Event{Type: "n", Data: json.RawMessage(fmt.Sprintf(`{"n":%d}`, n))})
	}
	for range 3 {
		waitFor(t, first, "the first member taking 1..3")
	}
	claimer := make(chan int, 3)
	c1 := mustSubscribe(t, b, "t", block(claimer), append(opts, pubsub.ClaimPending())...)
	defer c1.Unsubscribe(ctx)
	if n := waitFor(t, claimer, "the first claimer's first delivery"); n != 1 {
		t.Fatalf("first claimer got %d first, want 1", n)
	}
	got := make(chan pubsub.Event, 3)
	c2 := mustSubscribe(t, b, "t", func(_ context.Context, e pubsub.Event) error {
		got <- e
		return nil
	}, append(opts, pubsub.ClaimPending())...)
	defer c2.Unsubscribe(ctx)
	for want := 1; want <= 3; want++ {
		e := waitFor(t, got, "the second claimer's deliveries")
		var v struct{ N int }
		_ = json.Unmarshal(e.Data, &v)
		if v.N != want || e.DeliveryAttempt < 2 {
			t.Fatalf("second claimer got event %d (attempt %d), want %d (attempt >= 2)", v.N, e.DeliveryAttempt, want)
		}
	}
}
