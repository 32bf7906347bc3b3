package pubsubtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/leasebus/leasebus/pubsub"
)

// A nacked event waiting for its redelivery delay holds no handler slot: on
// a group subscription with Concurrency(2) whose two slots each nacked an
// event (delay 1s), a third event is handled before either nacked event
// comes back. (With the slots held for the delay, it would come after.)
func (s *suite) nackHoldsUpNothing(t *testing.T) {
	ps := s.backend(t)
	topic := topicFor(t)
	rec := newRecorder()
	s.subscribe(t, ps, topic, func(_ context.Context, e pubsub.Event) error {
		rec.add("m", e)
		if e.Type == "nack-once" && e.DeliveryAttempt == 1 {
			return fmt.Errorf("attempt %d fails", e.DeliveryAttempt)
		}
		return nil
	}, pubsub.Group("g"), pubsub.Concurrency(2), pubsub.RedeliveryDelay(time.Second))
	s.publish(t, ps, topic, pubsub.Event{ID: "n1", Type: "nack-once"})
	s.publish(t, ps, topic, pubsub.Event{ID: "n2", Type: "nack-once"})
	rec.waitFor(t, s, "both nacked", func(ds []delivery) bool { return len(ds) >= 2 })
	s.publish(t, ps, topic, pubsub.Event{ID: "ok", Type: "ok"})
	rec.waitFor(t, s, "both redelivered", func(ds []delivery) bool {
		n := 0
		for _, d := range ds {
			if d.e.DeliveryAttempt == 2 {
				n++
			}
		}
		return n == 2
	})
	var order []string
	for _, d := range rec.all() {
		order = append(order, fmt.Sprintf("%s#%d", d.e.ID, d.e.DeliveryAttempt))
	}
	for _, o := range order {
		if o == "ok#1" {
			return
		}
		if o == "n1#2" || o == "n2#2" {
			t.Fatalf("deliveries %v: a nacked event came back before the next event was handled; its wait held a handler slot", order)
		}
	}
	t.Fatalf("deliveries %v: the event published after the nacks was never handled", order)
}

// A ReadOnDemand group subscription gets what was published before it
// started and, after each Kick, what was published before the Kick; it
// never misses an event it was kicked for, including one published while
// a read is in flight.
func (s *suite) readOnDemandReadsWhatWasKicked(t *testing.T) {
	ps := s.backend(t)
	topic := topicFor(t)
	s.publish(t, ps, topic, pubsub.Event{ID: "before", Type: "x"})
	rec := newRecorder()
	sub := s.subscribe(t, ps, topic, func(_ context.Context, e pubsub.Event) error {
		rec.add("m", e)
		return nil
	}, pubsub.Group("g"), pubsub.StartFrom(pubsub.Earliest), pubsub.ReadOnDemand(), pubsub.Concurrency(4))
	rec.waitFor(t, s, "the event published before Subscribe", func(ds []delivery) bool { return len(ds) == 1 })
	k, ok := sub.(pubsub.Kicker)
	const n = 300
	for i := range n {
		s.publish(t, ps, topic, pubsub.Event{ID: fmt.Sprint("k", i), Type: "x"})
		if ok {
			k.Kick()
		}
	}
	rec.waitFor(t, s, fmt.Sprintf("%d kicked events", n), func(ds []delivery) bool { return len(ds) == n+1 })
	seen := map[string]int{}
	for _, d := range rec.all() {
		seen[d.e.ID]++
	}
	for id, c := range seen {
		if c != 1 {
			t.Errorf("event %s delivered %d times, want once", id, c)
		}
	}
}

// On a backend with pubsub.GroupPublisher and the smallest retention,
// events published with PublishFor before the group's first member
// subscribed are all delivered to it: none is trimmed for lack of a group.
// (The signals runtime publishes into a thread's inbox this way.)
func (s *suite) publishForKeepsEvents(t *testing.T) {
	ps := s.c.NewWithRetention(t, MinRetention)
	if ps == nil {
		t.Fatal("pubsubtest: Config.NewWithRetention returned nil")
	}
	t.Cleanup(func() { _ = ps.Close() })
	gp, ok := ps.(pubsub.GroupPublisher)
	if !ok {
		t.Skip("pubsubtest: the backend has no pubsub.GroupPublisher")
	}
	topic := topicFor(t)
	if err := gp.PublishFor(s.ctx(t), topic, "", pubsub.Event{Type: "x"}); !errors.Is(err, pubsub.ErrInvalid) {
		t.Errorf("PublishFor with an empty group: %v, want an error wrapping ErrInvalid", err)
	}
	const n = 50
	for i := range n {
		if err := gp.PublishFor(s.ctx(t), topic, "g", pubsub.Event{ID: fmt.Sprint("e", i), Type: "x"}); err != nil {
			t.Fatalf("PublishFor %d: %v", i, err)
		}
	}
	rec := newRecorder()
	s.subscribe(t, ps, topic, rec.handler("m"), pubsub.Group("g"), pubsub.StartFrom(pubsub.Earliest))
	rec.waitDistinct(t, s, n)
}

// publishBatchInOrder: PublishBatch (pubsub.BatchPublisher) checks every
// publication before it sends any (an invalid one publishes nothing),
// delivers each event once, in the order given within a topic, creates the
// group of a publication that names one before the event (so retention
// keeps it), and publishes nothing for an empty batch.
func (s *suite) publishBatchInOrder(t *testing.T) {
	ps := s.c.NewWithRetention(t, MinRetention)
	if ps == nil {
		t.Fatal("pubsubtest: Config.NewWithRetention returned nil")
	}
	t.Cleanup(func() { _ = ps.Close() })
	bp, ok := ps.(pubsub.BatchPublisher)
	if !ok {
		t.Skip("pubsubtest: the backend has no pubsub.BatchPublisher")
	}
	a, b := topicFor(t)+"-a", topicFor(t)+"-b"
	err := bp.PublishBatch(s.ctx(t), []pubsub.Publication{
		{Topic: a, Group: "g", Event: pubsub.Event{ID: "bad0", Type: "x"}},
		{Topic: b, Event: pubsub.Event{ID: "bad1"}}, // no type
	})
	if !errors.Is(err, pubsub.ErrInvalid) {
		t.Fatalf("PublishBatch with an invalid publication: %v, want an error wrapping ErrInvalid", err)
	}
	if err := bp.PublishBatch(s.ctx(t), nil); err != nil {
		t.Fatalf("PublishBatch of nothing: %v", err)
	}
	// b's group exists before the batches; a's is created by them.
	recB := newRecorder()
	s.subscribe(t, ps, b, recB.handler("b"), pubsub.Group("h"), pubsub.StartFrom(pubsub.Earliest), pubsub.Concurrency(1))
	const n = 30
	for i := range n {
		err := bp.PublishBatch(s.ctx(t), []pubsub.Publication{
			{Topic: a, Group: "g", Event: pubsub.Event{ID: fmt.Sprint("a", 2*i), Type: "x"}},
			{Topic: b, Event: pubsub.Event{ID: fmt.Sprint("b", i), Type: "x"}},
			{Topic: a, Group: "g", Event: pubsub.Event{ID: fmt.Sprint("a", 2*i+1), Type: "x"}},
		})
		if err != nil {
			t.Fatalf("PublishBatch %d: %v", i, err)
		}
	}
	// A last batch marks the end of each topic: with one handler per
	// group, everything before it was delivered first.
	err = bp.PublishBatch(s.ctx(t), []pubsub.Publication{
		{Topic: a, Group: "g", Event: pubsub.Event{ID: "end", Type: "end"}},
		{Topic: b, Event: pubsub.Event{ID: "end", Type: "end"}},
	})
	if err != nil {
		t.Fatalf("PublishBatch of the end marks: %v", err)
	}
	recA := newRecorder()
	s.subscribe(t, ps, a, recA.handler("a"), pubsub.Group("g"), pubsub.StartFrom(pubsub.Earliest), pubsub.Concurrency(1))
	for _, c := range []struct {
		rec    *recorder
		prefix string
		n      int
	}{{recA, "a", 2 * n}, {recB, "b", n}} {
		got := c.rec.waitType(t, s, "end")
		var ids []string
		for _, d := range got {
			ids = append(ids, d.e.ID)
		}
		want := make([]string, 0, c.n+1)
		for i := range c.n {
			want = append(want, fmt.Sprint(c.prefix, i))
		}
		want = append(want, "end")
		if !slices.Equal(ids, want) {
			t.Errorf("topic %s: got %v,\nwant %v (each event once, in the order of the batches, none of the invalid batch)", c.prefix, ids, want)
		}
	}
}

// A group member that nacked an event, due for a redelivery (long delay),
// and then stops hands it back: another member gets it promptly as its next
// attempt (2), far sooner than the AckDeadline, and once. Three ways to
// nack (a Concurrency(1) handler, a Concurrency(2) one, a handler that fails
// because the subscription stops under it), two receivers: a live member on
// the peer, and a member that subscribes after the stop.
func (s *suite) nackedGoesBackOnStop(t *testing.T) {
	// The AckDeadline outlasts every wait of the suite: an event that only
	// its expiry brings back fails the test.
	deadline := max(time.Minute, 2*s.c.Timeout)
	kinds := []struct {
		name        string
		concurrency int
		failAtStop  bool
	}{
		{"Concurrency1", 1, false},
		{"Concurrency2", 2, false},
		{"FailsAsItStops", 1, true},
	}
	for _, k := range kinds {
		for _, later := range []bool{false, true} {
			name := k.name + "/LiveMember"
			if later {
				name = k.name + "/NextMember"
			}
			t.Run(name, func(t *testing.T) {
				ps := s.backend(t)
				peer := s.peer(t, ps)
				topic := topicFor(t)
				opts := []pubsub.SubscribeOption{pubsub.Group("g"), pubsub.AckDeadline(deadline)}
				nacked := make(chan struct{}, 1)
				leaving := s.subscribe(t, ps, topic, func(ctx context.Context, e pubsub.Event) error {
					select {
					case nacked <- struct{}{}:
					default:
					}
					if k.failAtStop {
						<-ctx.Done()
						return ctx.Err()
					}
					return errors.New("pubsubtest: nack")
				}, append(opts, pubsub.Concurrency(k.concurrency), pubsub.RedeliveryDelay(deadline))...)
				s.publish(t, ps, topic, pubsub.Event{ID: "e1", Type: "e1"})
				s.await(t, nacked, "the first delivery")
				rec := newRecorder()
				if !later {
					s.subscribe(t, peer, topic, rec.handler("heir"), opts...)
				}
				if err := leaving.Unsubscribe(s.ctx(t)); err != nil {
					t.Fatalf("Unsubscribe: %v", err)
				}
				if later {
					s.subscribe(t, peer, topic, rec.handler("heir"), opts...)
				}
				d := rec.waitN(t, s, 1)[0]
				if d.e.ID != "e1" || d.e.DeliveryAttempt != 2 {
					t.Errorf("after the nacking member stopped: ID %q attempt %d, want %q attempt 2", d.e.ID, d.e.DeliveryAttempt, "e1")
				}
				s.publish(t, ps, topic, pubsub.Event{ID: "marker", Type: "marker"})
				rec.waitType(t, s, "marker")
				s.flush(t, peer)
				if n := countIDs(rec.all())["e1"]; n != 1 {
					t.Errorf("e1 delivered %d times after the nacking member stopped, want 1", n)
				}
			})
		}
	}
}
