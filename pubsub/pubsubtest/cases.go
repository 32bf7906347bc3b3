package pubsubtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasebus/leasebus/pubsub"
)

// closeTo reports whether got is want within the backend's time precision.
func (s *suite) closeTo(got, want time.Time) bool {
	if s.f.TimePrecision == 0 {
		return got.Equal(want)
	}
	d := got.Sub(want)
	return d <= s.f.TimePrecision && -d <= s.f.TimePrecision
}

// Publish fills in a missing ID (unique) and CreatedAt (now), keeps given
// ones, and ignores DeliveryAttempt; the first delivery has attempt 1.
func (s *suite) publishAssignsIDAndCreatedAt(t *testing.T) {
	ps := s.backend(t)
	topic := topicFor(t)
	rec := newRecorder()
	s.subscribe(t, ps, topic, rec.handler("m"))

	given := time.Date(2024, 2, 29, 23, 59, 58, 123456789, time.UTC)
	before := time.Now()
	s.publish(t, ps, topic, pubsub.Event{Type: "a"})
	s.publish(t, ps, topic, pubsub.Event{Type: "b", DeliveryAttempt: 7})
	s.publish(t, ps, topic, pubsub.Event{Type: "c", ID: "given-id", CreatedAt: given})
	after := time.Now()

	byType := map[string]pubsub.Event{}
	for _, d := range rec.waitN(t, s, 3) {
		byType[d.e.Type] = d.e
	}
	a, b, c := byType["a"], byType["b"], byType["c"]
	if a.ID == "" || b.ID == "" {
		t.Errorf("assigned IDs %q, %q; want non-empty", a.ID, b.ID)
	}
	if a.ID == b.ID {
		t.Errorf("two events got the same assigned ID %q", a.ID)
	}
	slack := s.f.TimePrecision
	for _, e := range []pubsub.Event{a, b} {
		if e.CreatedAt.Before(before.Add(-slack)) || e.CreatedAt.After(after.Add(slack)) {
			t.Errorf("event %s: CreatedAt %v, want within [%v, %v]", e.Type, e.CreatedAt, before, after)
		}
	}
	if c.ID != "given-id" {
		t.Errorf("given ID came back as %q, want %q", c.ID, "given-id")
	}
	if !s.closeTo(c.CreatedAt, given) {
		t.Errorf("given CreatedAt came back as %v, want %v (precision %v)", c.CreatedAt, given, s.f.TimePrecision)
	}
	for _, e := range []pubsub.Event{a, b, c} {
		if e.DeliveryAttempt != 1 {
			t.Errorf("event %s: DeliveryAttempt %d on first delivery, want 1", e.Type, e.DeliveryAttempt)
		}
	}
}

// Every field survives the trip: nil and empty Data, arbitrary JSON bytes,
// Metadata, RunID, ID and CreatedAt (within Features.TimePrecision).
func (s *suite) dataAndMetadataRoundTrip(t *testing.T) {
	ps := s.backend(t)
	peer := s.peer(t, ps)
	topic := topicFor(t)
	rec := newRecorder()
	s.subscribe(t, peer, topic, rec.handler("m"))

	zone := time.FixedZone("UTC+5:30", 5*3600+1800)
	want := []pubsub.Event{
		{ID: "nil-data", Type: "t.nil"},
		{ID: "empty-data", Type: "t.empty", Data: json.RawMessage{}, Metadata: map[string]string{}},
		{
			ID:    "json",
			Type:  "t.json/ü {x}:y",
			RunID: "run-1",
			Data: json.RawMessage(`{"s":"h\u00e9llo \"q\" \\ \u0000 ✓ {}:","n":[1,2.5e-3,null,true],` +
				`"o":{},"b64":"AAEC/w=="}`),
			Metadata: map[string]string{
				"traceparent":          "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
				"empty":                "",
				"ключ":                 "значение",
				"spaces and:colons {}": "x\ny\tz",
			},
			CreatedAt: time.Date(2025, 1, 2, 3, 4, 5, 678901234, zone),
		},
		{ID: "scalar", Type: "t.scalar", Data: json.RawMessage(`"just a string"`), RunID: "run-2"},
	}
	for _, e := range want {
		s.publish(t, ps, topic, e)
	}
	got := map[string]pubsub.Event{}
	for _, d := range rec.waitN(t, s, len(want)) {
		got[d.e.ID] = d.e
	}
	for _, w := range want {
		g, ok := got[w.ID]
		if !ok {
			t.Errorf("event %q not delivered", w.ID)
			continue
		}
		if g.Type != w.Type || g.RunID != w.RunID {
			t.Errorf("event %q: Type %q RunID %q, want %q %q", w.ID, g.Type, g.RunID, w.Type, w.RunID)
		}
		if !bytes.Equal(g.Data, w.Data) {
			t.Errorf("event %q: Data %q, want %q", w.ID, g.Data, w.Data)
		}
		if len(g.Metadata) != len(w.Metadata) {
			t.Errorf("event %q: Metadata %q, want %q", w.ID, g.Metadata, w.Metadata)
		}
		for k, v := range w.Metadata {
			if gv, ok := g.Metadata[k]; !ok || gv != v {
				t.Errorf("event %q: Metadata[%q] = %q (present %v), want %q", w.ID, k, gv, ok, v)
			}
		}
		if !w.CreatedAt.IsZero() && !s.closeTo(g.CreatedAt, w.CreatedAt) {
			t.Errorf("event %q: CreatedAt %v, want %v (precision %v)", w.ID, g.CreatedAt, w.CreatedAt, s.f.TimePrecision)
		}
	}
}

// Bad input is rejected with an error wrapping ErrInvalid that names the
// field.
func (s *suite) invalidInput(t *testing.T) {
	ps := s.backend(t)
	ok := func(context.Context, pubsub.Event) error { return nil }
	type call func() error
	sub := func(topic string, h pubsub.Handler, opts ...pubsub.SubscribeOption) call {
		return func() error {
			sub, err := ps.Subscribe(s.ctx(t), topic, h, opts...)
			if err == nil && sub != nil {
				_ = sub.Unsubscribe(s.ctx(t))
			}
			return err
		}
	}
	topic := topicFor(t)
	cases := []struct {
		name, field string
		call        call
	}{
		{"PublishEmptyTopic", "topic", func() error { return ps.Publish(s.ctx(t), "", pubsub.Event{Type: "x"}) }},
		{"PublishEmptyType", "type", func() error { return ps.Publish(s.ctx(t), topic, pubsub.Event{ID: "e1"}) }},
		{"PublishMetadataNotUTF8", "metadata", func() error {
			return ps.Publish(s.ctx(t), topic, pubsub.Event{Type: "x", Metadata: map[string]string{"k": "\xff"}})
		}},
		{"PublishMetadataKeyNotUTF8", "metadata", func() error {
			return ps.Publish(s.ctx(t), topic, pubsub.Event{Type: "x", Metadata: map[string]string{"\xfe": "v"}})
		}},
		{"PublishCreatedAtTooLate", "createdat", func() error {
			return ps.Publish(s.ctx(t), topic, pubsub.Event{Type: "x", CreatedAt: time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)})
		}},
		{"PublishCreatedAtTooEarly", "createdat", func() error {
			return ps.Publish(s.ctx(t), topic, pubsub.Event{Type: "x", CreatedAt: time.Date(1600, 1, 1, 0, 0, 0, 0, time.UTC)})
		}},
		{"SubscribeEmptyTopic", "topic", sub("", ok)},
		{"SubscribeNilHandler", "handler", sub(topic, nil)},
		{"ConcurrencyZero", "concurrency", sub(topic, ok, pubsub.Concurrency(0))},
		{"ConcurrencyNegative", "concurrency", sub(topic, ok, pubsub.Concurrency(-1))},
		{"AckDeadlineZero", "ack deadline", sub(topic, ok, pubsub.AckDeadline(0))},
		{"AckDeadlineNegative", "ack deadline", sub(topic, ok, pubsub.AckDeadline(-time.Second))},
		{"MaxDeliveriesNegative", "max deliveries", sub(topic, ok, pubsub.MaxDeliveries(-1))},
		{"RedeliveryDelayNegative", "redelivery delay -1ms", sub(topic, ok, pubsub.RedeliveryDelay(-time.Millisecond))},
		{"GroupEmpty", "group", sub(topic, ok, pubsub.Group(""))},
		{"StartFromUnknown", "start", sub(topic, ok, pubsub.StartFrom(pubsub.Position(7)))},
		{"NilOption", "option", sub(topic, ok, pubsub.Concurrency(2), nil)},
		{"ClaimPendingWithoutGroup", "claim pending", sub(topic, ok, pubsub.ClaimPending())},
		{"ReadOnDemandWithoutGroup", "read on demand", sub(topic, ok, pubsub.ReadOnDemand())},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if !errors.Is(err, pubsub.ErrInvalid) {
				t.Fatalf("got error %v, want one wrapping pubsub.ErrInvalid", err)
			}
			if !strings.Contains(strings.ToLower(err.Error()), tc.field) {
				t.Errorf("error %q does not name the field %q", err, tc.field)
			}
		})
	}
}

// Every fan-out subscription, on this backend and on a peer, receives every
// event, whichever of them published it.
func (s *suite) fanOutEverySubscriberGetsEvery(t *testing.T) {
	ps := s.backend(t)
	peer := s.peer(t, ps)
	topic := topicFor(t)
	recs := []*recorder{newRecorder(), newRecorder(), newRecorder()}
	s.subscribe(t, ps, topic, recs[0].handler("a"))
	s.subscribe(t, ps, topic, recs[1].handler("b"), pubsub.Concurrency(3))
	sub := s.subscribe(t, peer, topic, recs[2].handler("c"))
	if sub.Topic() != topic {
		t.Errorf("Topic() = %q, want %q", sub.Topic(), topic)
	}
	s.publishSeq(t, ps, topic, 0, 10)
	s.publishSeq(t, peer, topic, 10, 20)
	for i, r := range recs {
		r.waitN(t, s, 20)
		s.flush(t, ps)
		s.flush(t, peer)
		checkSeqs(t, "subscriber "+strconv.Itoa(i), r.all(), 0, 20)
	}
}

// With StartFrom(Latest), the default, events published before Subscribe
// are not delivered.
func (s *suite) fanOutStartsAfterSubscribe(t *testing.T) {
	ps := s.backend(t)
	topic := topicFor(t)
	s.publish(t, ps, topic, pubsub.Event{Type: "before"})
	s.publish(t, ps, topic, pubsub.Event{Type: "before"})
	rec := newRecorder()
	s.subscribe(t, ps, topic, rec.handler("m"))
	s.publish(t, ps, topic, pubsub.Event{Type: "after"})
	rec.waitType(t, s, "after")
	s.flush(t, ps)
	for _, e := range rec.events() {
		if e.Type != "after" {
			t.Errorf("got event of type %q published before Subscribe", e.Type)
		}
	}
}

// The ctx of Subscribe bounds only the setup: cancelling it afterwards does
// not stop the subscription.
func (s *suite) subscribeCtxBoundsOnlySetup(t *testing.T) {
	ps := s.backend(t)
	topic := topicFor(t)
	rec := newRecorder()
	ctx, cancel := context.WithCancel(context.Background())
	sub, err := ps.Subscribe(ctx, topic, rec.handler("m"))
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe(context.Background()) })
	cancel()
	s.publishSeq(t, ps, topic, 0, 3)
	checkSeqs(t, "subscriber", rec.waitN(t, s, 3), 0, 3)
}

// StartFrom(Earliest) replays the events kept from before Subscribe, in
// order, for a fan-out subscription and a new group; Latest does not.
func (s *suite) startFromEarliest(t *testing.T) {
	ps := s.backend(t)
	topic := topicFor(t)
	s.publishSeq(t, ps, topic, 0, 3)

	fan := newRecorder()
	s.subscribe(t, ps, topic, fan.handler("m"), pubsub.StartFrom(pubsub.Earliest))
	var grp, late *recorder
	if s.f.ConsumerGroups {
		grp, late = newRecorder(), newRecorder()
		s.subscribe(t, ps, topic, grp.handler("g"), pubsub.Group("early"), pubsub.StartFrom(pubsub.Earliest))
		s.subscribe(t, ps, topic, late.handler("l"), pubsub.Group("late"), pubsub.StartFrom(pubsub.Latest))
	}
	s.publishSeq(t, ps, topic, 3, 5)
	ds := fan.waitN(t, s, 5)
	for i, d := range ds {
		if n := seqOf(d.e); n != i {
			t.Fatalf("fan-out delivery %d is event %d, want %d (order from Earliest)", i, n, i)
		}
	}
	if grp != nil {
		grp.waitN(t, s, 5)
		late.waitN(t, s, 2)
		s.flush(t, ps)
		checkSeqs(t, "new group from Earliest", grp.all(), 0, 5)
		checkSeqs(t, "new group from Latest", late.all(), 3, 5)
	}
	s.flush(t, ps)
	checkSeqs(t, "fan-out from Earliest", fan.all(), 0, 5)
}

// After Unsubscribe returns, the subscription receives nothing more, while
// the others go on.
func (s *suite) unsubscribedGetsNothingMore(t *testing.T) {
	ps := s.backend(t)
	topic := topicFor(t)
	gone, stays := newRecorder(), newRecorder()
	sub := s.subscribe(t, ps, topic, gone.handler("gone"))
	s.subscribe(t, ps, topic, stays.handler("stays"))
	s.publishSeq(t, ps, topic, 0, 1)
	gone.waitN(t, s, 1)
	stays.waitN(t, s, 1)
	if err := sub.Unsubscribe(s.ctx(t)); err != nil {
		t.Fatalf("Unsubscribe: %v", err)
	}
	s.publishSeq(t, ps, topic, 1, 4)
	stays.waitN(t, s, 4)
	s.flush(t, ps)
	checkSeqs(t, "unsubscribed", gone.all(), 0, 1)
	checkSeqs(t, "still subscribed", stays.all(), 0, 4)
}

// Topics are independent: a subscription sees only its topic's events.
func (s *suite) topicsIndependent(t *testing.T) {
	ps := s.backend(t)
	t1, t2 := topicFor(t)+".one", topicFor(t)+".two"
	r1, r2 := newRecorder(), newRecorder()
	s.subscribe(t, ps, t1, r1.handler("1"))
	s.subscribe(t, ps, t2, r2.handler("2"))
	for range 5 {
		s.publish(t, ps, t1, pubsub.Event{Type: "one"})
		s.publish(t, ps, t2, pubsub.Event{Type: "two"})
	}
	r1.waitN(t, s, 5)
	r2.waitN(t, s, 5)
	s.flush(t, ps)
	for typ, r := range map[string]*recorder{"one": r1, "two": r2} {
		es := r.events()
		if len(es) != 5 {
			t.Errorf("topic %s: %d events, want 5", typ, len(es))
		}
		for _, e := range es {
			if e.Type != typ {
				t.Errorf("subscriber of topic %s got an event of type %q", typ, e.Type)
			}
		}
	}
}

// A group hands each event to exactly one member, across members on this
// backend and on a peer.
func (s *suite) groupEachEventOnce(t *testing.T) {
	ps := s.backend(t)
	peer := s.peer(t, ps)
	topic := topicFor(t)
	rec := newRecorder()
	g := pubsub.Group("workers")
	s.subscribe(t, ps, topic, rec.handler("a"), g, pubsub.Concurrency(2))
	s.subscribe(t, ps, topic, rec.handler("b"), g)
	s.subscribe(t, peer, topic, rec.handler("c"), g)
	s.publishSeq(t, ps, topic, 0, 30)
	s.publishSeq(t, peer, topic, 30, 60)
	rec.waitDistinct(t, s, 60)
	s.flush(t, ps)
	s.flush(t, peer)
	checkSeqs(t, "group", rec.all(), 0, 60)
}

// Different groups, and fan-out subscriptions beside them, each receive
// every event.
func (s *suite) groupsIndependent(t *testing.T) {
	ps := s.backend(t)
	peer := s.peer(t, ps)
	topic := topicFor(t)
	g1, g2, fan := newRecorder(), newRecorder(), newRecorder()
	s.subscribe(t, ps, topic, g1.handler("1a"), pubsub.Group("one"))
	s.subscribe(t, peer, topic, g1.handler("1b"), pubsub.Group("one"))
	s.subscribe(t, peer, topic, g2.handler("2a"), pubsub.Group("two"))
	s.subscribe(t, ps, topic, fan.handler("f"))
	s.publishSeq(t, ps, topic, 0, 30)
	g1.waitDistinct(t, s, 30)
	g2.waitDistinct(t, s, 30)
	fan.waitN(t, s, 30)
	s.flush(t, ps)
	s.flush(t, peer)
	checkSeqs(t, "group one", g1.all(), 0, 30)
	checkSeqs(t, "group two", g2.all(), 0, 30)
	checkSeqs(t, "fan-out", fan.all(), 0, 30)
}

// A group that exists keeps its position: while it has no member, events
// wait for it, and a returning member starts there, even when it asks for
// StartFrom(Earliest).
func (s *suite) groupKeepsCheckpoint(t *testing.T) {
	ps := s.backend(t)
	peer := s.peer(t, ps)
	topic := topicFor(t)
	first := newRecorder()
	sub := s.subscribe(t, ps, topic, first.handler("first"), pubsub.Group("g"))
	s.publishSeq(t, ps, topic, 0, 5)
	first.waitN(t, s, 5)
	s.flush(t, ps)
	if err := sub.Unsubscribe(s.ctx(t)); err != nil {
		t.Fatalf("Unsubscribe: %v", err)
	}
	s.publishSeq(t, ps, topic, 5, 10) // the group has no member now

	second := newRecorder()
	s.subscribe(t, peer, topic, second.handler("second"), pubsub.Group("g"), pubsub.StartFrom(pubsub.Earliest))
	second.waitDistinct(t, s, 5)
	s.publishSeq(t, ps, topic, 10, 11)
	second.waitDistinct(t, s, 6)
	s.flush(t, ps)
	s.flush(t, peer)
	checkSeqs(t, "first member", first.all(), 0, 5)
	checkSeqs(t, "returning member", second.all(), 5, 11)
}

// A nacked event is delivered again, with DeliveryAttempt counting up and
// the event unchanged, to the same fan-out subscription or to a member of
// the group.
func (s *suite) nackRedelivers(t *testing.T) {
	run := func(t *testing.T, opts ...pubsub.SubscribeOption) {
		ps := s.backend(t)
		topic := topicFor(t)
		rec := newRecorder()
		h := func(member string) pubsub.Handler {
			return func(_ context.Context, e pubsub.Event) error {
				rec.add(member, e)
				if e.Type == "fail-twice" && e.DeliveryAttempt < 3 {
					return fmt.Errorf("attempt %d fails", e.DeliveryAttempt)
				}
				return nil
			}
		}
		s.subscribe(t, ps, topic, h("a"), opts...)
		if len(opts) > 0 { // a group: a second member
			s.subscribe(t, ps, topic, h("b"), opts...)
		}
		want := pubsub.Event{
			ID: "e1", Type: "fail-twice", RunID: "r1",
			Data: json.RawMessage(`{"x":1}`), Metadata: map[string]string{"k": "v"},
		}
		s.publish(t, ps, topic, want)
		rec.waitFor(t, s, "attempt 3", func(ds []delivery) bool {
			return len(ds) > 0 && ds[len(ds)-1].e.DeliveryAttempt >= 3
		})
		s.publish(t, ps, topic, pubsub.Event{Type: "marker"})
		rec.waitType(t, s, "marker")
		s.flush(t, ps)
		var attempts []int
		for _, d := range rec.all() {
			e := d.e
			if e.Type == "marker" {
				continue
			}
			attempts = append(attempts, e.DeliveryAttempt)
			if e.ID != want.ID || e.RunID != want.RunID || !bytes.Equal(e.Data, want.Data) || e.Metadata["k"] != "v" {
				t.Errorf("redelivery %d changed the event: %+v", e.DeliveryAttempt, e)
			}
		}
		if fmt.Sprint(attempts) != "[1 2 3]" {
			t.Errorf("delivery attempts %v, want [1 2 3]", attempts)
		}
	}
	s.bothKinds(t, "Group", run)
}

// A panicking handler nacks: the event is redelivered, and the subscription
// keeps working.
func (s *suite) panicRedelivers(t *testing.T) {
	ps := s.backend(t)
	topic := topicFor(t)
	rec := newRecorder()
	s.subscribe(t, ps, topic, func(_ context.Context, e pubsub.Event) error {
		rec.add("m", e)
		if e.Type == "panics" && e.DeliveryAttempt == 1 {
			panic("pubsubtest: deliberate panic")
		}
		return nil
	})
	s.publish(t, ps, topic, pubsub.Event{Type: "panics"})
	rec.waitFor(t, s, "the redelivery after a panic", func(ds []delivery) bool {
		return len(ds) > 0 && ds[len(ds)-1].e.DeliveryAttempt == 2
	})
	s.publish(t, ps, topic, pubsub.Event{Type: "next"})
	rec.waitType(t, s, "next")
	s.flush(t, ps)
	var got []string
	for _, d := range rec.all() {
		got = append(got, d.e.Type+"#"+strconv.Itoa(d.e.DeliveryAttempt))
	}
	if fmt.Sprint(got) != "[panics#1 panics#2 next#1]" {
		t.Errorf("deliveries %v, want [panics#1 panics#2 next#1]", got)
	}
}

// A handler that ends its goroutine instead of returning (runtime.Goexit,
// as testing's FailNow does when a handler calls it) nacks, as a panic
// does: the event is redelivered (with the attempt counted), the
// subscription keeps its Concurrency, and Flush and Unsubscribe return.
func (s *suite) goexitRedelivers(t *testing.T) {
	run := func(t *testing.T, opts ...pubsub.SubscribeOption) {
		for _, n := range []int{1, 2} {
			t.Run(fmt.Sprintf("Concurrency%d", n), func(t *testing.T) {
				ps := s.backend(t)
				topic := topicFor(t)
				rec := newRecorder()
				// n "hold" events each wait until n handlers run at once:
				// the subscription kept its Concurrency after the Goexits.
				var holding atomic.Int32
				together := make(chan struct{})
				var apart atomic.Int32
				s.subscribe(t, ps, topic, func(_ context.Context, e pubsub.Event) error {
					switch {
					case e.Type == "exits" && e.DeliveryAttempt < 3:
						rec.add("m", e)
						runtime.Goexit()
					case e.Type == "hold":
						if holding.Add(1) == int32(n) {
							close(together)
						}
						select {
						case <-together:
						case <-time.After(s.c.Timeout):
							apart.Add(1)
						}
					}
					rec.add("m", e)
					return nil
				}, append(opts, pubsub.Concurrency(n))...)
				s.publish(t, ps, topic, pubsub.Event{Type: "exits"})
				rec.waitFor(t, s, "attempt 3 after two Goexits", func(ds []delivery) bool {
					return len(ds) > 0 && ds[len(ds)-1].e.Type == "exits" && ds[len(ds)-1].e.DeliveryAttempt == 3
				})
				for range n {
					s.publish(t, ps, topic, pubsub.Event{Type: "hold"})
				}
				s.flush(t, ps)
				var got []string
				for _, d := range rec.all() {
					got = append(got, d.e.Type+"#"+strconv.Itoa(d.e.DeliveryAttempt))
				}
				want := "[exits#1 exits#2 exits#3" + strings.Repeat(" hold#1", n) + "]"
				if fmt.Sprint(got) != want {
					t.Errorf("deliveries %v, want %s", got, want)
				}
				if a := apart.Load(); a > 0 {
					t.Errorf("%d of %d hold handlers never ran beside the others: the Goexits cost the subscription its Concurrency(%d)", a, n, n)
				}
			})
		}
	}
	s.bothKinds(t, "Group", run)
}

// A group delivery not acked within AckDeadline goes to another live member:
// when the handler is stuck, and when its member leaves without acking.
func (s *suite) ackDeadlineRedelivers(t *testing.T) {
	const deadline = 300 * time.Millisecond
	t.Run("StuckHandler", func(t *testing.T) {
		ps := s.backend(t)
		peer := s.peer(t, ps)
		topic := topicFor(t)
		rec := newRecorder()
		release := make(chan struct{})
		stuck := make(chan string, 1)
		h := func(member string) pubsub.Handler {
			return func(ctx context.Context, e pubsub.Event) error {
				if e.DeliveryAttempt == 1 {
					stuck <- member
					select {
					case <-release:
						return nil // a late ack
					case <-ctx.Done():
						return ctx.Err()
					}
				}
				rec.add(member, e)
				return nil
			}
		}
		// Both members could take the event again while one of them still
		// runs it: only the other one may.
		opts := []pubsub.SubscribeOption{pubsub.Group("g"), pubsub.AckDeadline(deadline), pubsub.Concurrency(2)}
		s.subscribe(t, ps, topic, h("a"), opts...)
		s.subscribe(t, peer, topic, h("b"), opts...)
		defer close(release)
		s.publish(t, ps, topic, pubsub.Event{ID: "slow", Type: "slow"})
		var first string
		select {
		case first = <-stuck:
		case <-time.After(s.c.Timeout):
			t.Fatal("first delivery never came")
		}
		ds := rec.waitN(t, s, 1)
		d := ds[0]
		if d.e.ID != "slow" || d.e.DeliveryAttempt < 2 {
			t.Errorf("redelivery: ID %q attempt %d, want %q and at least 2", d.e.ID, d.e.DeliveryAttempt, "slow")
		}
		if d.member == first {
			t.Errorf("redelivered to member %s, whose handler is still running it; want the other member", first)
		}
	})
	t.Run("MemberLeavesWithoutAck", func(t *testing.T) {
		ps := s.backend(t)
		peer := s.peer(t, ps)
		topic := topicFor(t)
		entered := make(chan struct{}, 1)
		opts := []pubsub.SubscribeOption{pubsub.Group("g"), pubsub.AckDeadline(deadline)}
		leaving := s.subscribe(t, peer, topic, func(ctx context.Context, e pubsub.Event) error {
			entered <- struct{}{}
			<-ctx.Done() // never acks
			return ctx.Err()
		}, opts...)
		s.publish(t, ps, topic, pubsub.Event{ID: "orphan", Type: "orphan"})
		s.await(t, entered, "the first delivery")
		rec := newRecorder()
		s.subscribe(t, ps, topic, rec.handler("heir"), opts...)
		if peer != ps {
			// Another process's backend goes away: the way a process dies.
			if err := peer.Close(); err != nil {
				t.Fatalf("Close of peer: %v", err)
			}
		} else if err := leaving.Unsubscribe(s.ctx(t)); err != nil {
			t.Fatalf("Unsubscribe: %v", err)
		}
		d := rec.waitN(t, s, 1)[0]
		if d.e.ID != "orphan" || d.e.DeliveryAttempt < 2 {
			t.Errorf("redelivery: ID %q attempt %d, want %q and at least 2", d.e.ID, d.e.DeliveryAttempt, "orphan")
		}
	})
}

// After MaxDeliveries failed attempts the event goes to "<topic>.dead", with
// its own metadata and the dead-letter metadata, and is not redelivered on
// the original topic.
func (s *suite) maxDeliveriesDeadLetters(t *testing.T) {
	run := func(t *testing.T, opts ...pubsub.SubscribeOption) {
		ps := s.backend(t)
		topic := topicFor(t)
		dead := newRecorder()
		s.subscribe(t, ps, pubsub.DeadLetterTopic(topic), dead.handler("dead"))
		rec := newRecorder()
		opts = append(opts, pubsub.MaxDeliveries(3))
		s.subscribe(t, ps, topic, func(_ context.Context, e pubsub.Event) error {
			rec.add("m", e)
			if e.Type == "poison" {
				return fmt.Errorf("boom on attempt %d", e.DeliveryAttempt)
			}
			return nil
		}, opts...)
		want := pubsub.Event{
			ID: "p1", Type: "poison", RunID: "r1",
			Data: json.RawMessage(`{"bad":true}`), Metadata: map[string]string{"k": "v"},
		}
		s.publish(t, ps, topic, want)
		got := dead.waitN(t, s, 1)[0].e
		if got.ID != want.ID || got.Type != want.Type || got.RunID != want.RunID || !bytes.Equal(got.Data, want.Data) {
			t.Errorf("dead letter %+v does not carry the event %+v", got, want)
		}
		for k, v := range map[string]string{
			"k":                     "v",
			pubsub.MetaDeadTopic:    topic,
			pubsub.MetaDeadAttempts: "3",
		} {
			if got.Metadata[k] != v {
				t.Errorf("dead letter Metadata[%q] = %q, want %q", k, got.Metadata[k], v)
			}
		}
		if r := got.Metadata[pubsub.MetaDeadReason]; !strings.Contains(r, "boom") {
			t.Errorf("dead letter Metadata[%q] = %q, want the handler's error", pubsub.MetaDeadReason, r)
		}
		s.publish(t, ps, topic, pubsub.Event{Type: "marker"})
		rec.waitType(t, s, "marker")
		s.flush(t, ps)
		var attempts []int
		for _, e := range rec.events() {
			if e.Type == "poison" {
				attempts = append(attempts, e.DeliveryAttempt)
			}
		}
		if fmt.Sprint(attempts) != "[1 2 3]" {
			t.Errorf("attempts on the original topic %v, want [1 2 3] (acked when dead-lettered)", attempts)
		}
		if n := len(dead.all()); n != 1 {
			t.Errorf("%d dead letters, want 1", n)
		}
	}
	s.bothKinds(t, "Group", run)
}

// With Concurrency(1) a subscription sees the topic's events in publish
// order.
func (s *suite) orderWithConcurrency1(t *testing.T) {
	const n = 200
	run := func(t *testing.T, opts ...pubsub.SubscribeOption) {
		ps := s.backend(t)
		topic := topicFor(t)
		rec := newRecorder()
		s.subscribe(t, ps, topic, rec.handler("m"), opts...)
		s.publishSeq(t, ps, topic, 0, n)
		for i, d := range rec.waitN(t, s, n) {
			if got := seqOf(d.e); got != i {
				t.Fatalf("delivery %d is event %d, want %d", i, got, i)
			}
		}
	}
	s.bothKinds(t, "GroupOfOne", run)
}

// Concurrency(n) runs n handlers at once, and never more: the first n
// handlers wait at a barrier that opens only when n are inside together.
func (s *suite) concurrencyN(t *testing.T) {
	const n = 4
	run := func(t *testing.T, opts ...pubsub.SubscribeOption) {
		ps := s.backend(t)
		topic := topicFor(t)
		var (
			mu        sync.Mutex
			inside    int
			maxInside int
			stuck     atomic.Bool
		)
		full := make(chan struct{})
		rec := newRecorder()
		opts = append(opts, pubsub.Concurrency(n))
		s.subscribe(t, ps, topic, func(ctx context.Context, e pubsub.Event) error {
			mu.Lock()
			inside++
			maxInside = max(maxInside, inside)
			if inside >= n {
				select {
				case <-full:
				default:
					close(full)
				}
			}
			mu.Unlock()
			timer := time.NewTimer(s.c.Timeout)
			select {
			case <-full:
			case <-timer.C:
				stuck.Store(true)
			case <-ctx.Done():
			}
			timer.Stop()
			mu.Lock()
			inside--
			mu.Unlock()
			rec.add("m", e)
			return nil
		}, opts...)
		s.publishSeq(t, ps, topic, 0, 3*n)
		s.await(t, full, strconv.Itoa(n)+" handlers running at once")
		rec.waitN(t, s, 3*n)
		s.flush(t, ps)
		checkSeqs(t, "subscriber", rec.all(), 0, 3*n)
		mu.Lock()
		defer mu.Unlock()
		if maxInside > n {
			t.Errorf("%d handlers ran at once, want at most %d", maxInside, n)
		}
		if stuck.Load() {
			t.Errorf("a handler waited %v at the barrier", s.c.Timeout)
		}
	}
	s.bothKinds(t, "GroupOfOne", run)
}

// Flush returns after every event published before it was handled by the
// current subscriptions' handlers, and returns ctx.Err() when ctx ends
// first.
func (s *suite) flushWaitsForDelivery(t *testing.T) {
	ps := s.backend(t)
	topic := topicFor(t)
	if err := ps.Flush(s.ctx(t)); err != nil {
		t.Fatalf("Flush with nothing to do: %v", err)
	}
	const n = 40
	var fanDone, groupDone, running atomic.Int64
	slow := func(count *atomic.Int64) pubsub.Handler {
		return func(context.Context, pubsub.Event) error {
			running.Add(1)
			defer running.Add(-1)
			time.Sleep(time.Millisecond) // work, not synchronisation
			count.Add(1)
			return nil
		}
	}
	s.subscribe(t, ps, topic, slow(&fanDone))
	if s.f.ConsumerGroups {
		s.subscribe(t, ps, topic, slow(&groupDone), pubsub.Group("g"))
	}
	s.publishSeq(t, ps, topic, 0, n)
	s.flush(t, ps)
	if got := fanDone.Load(); got != n {
		t.Errorf("after Flush the fan-out handler finished %d events, want %d", got, n)
	}
	if s.f.ConsumerGroups {
		if got := groupDone.Load(); got != n {
			t.Errorf("after Flush the group handler finished %d events, want %d", got, n)
		}
	}
	if r := running.Load(); r != 0 {
		t.Errorf("after Flush %d handlers still run, want 0", r)
	}

	t.Run("CtxEnds", func(t *testing.T) {
		topic := topicFor(t)
		release := make(chan struct{})
		entered := make(chan struct{}, 1)
		s.subscribe(t, ps, topic, func(ctx context.Context, e pubsub.Event) error {
			entered <- struct{}{}
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil
		})
		defer close(release)
		s.publish(t, ps, topic, pubsub.Event{Type: "blocks"})
		s.await(t, entered, "the handler to start")
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		if err := ps.Flush(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Flush while a handler is blocked: got %v, want context.DeadlineExceeded", err)
		}
	})
}

// Concurrent publishers lose nothing: 8×100 events reach a fan-out
// subscription exactly once each.
func (s *suite) concurrentPublishers(t *testing.T) {
	const publishers, each = 8, 100
	ps := s.backend(t)
	peer := s.peer(t, ps)
	topic := topicFor(t)
	rec := newRecorder()
	s.subscribe(t, ps, topic, rec.handler("m"))
	var wg sync.WaitGroup
	errs := make(chan error, publishers)
	for p := range publishers {
		target := ps
		if p%2 == 1 {
			target = peer
		}
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), s.c.Timeout)
			defer cancel()
			for i := range each {
				if err := target.Publish(ctx, topic, seqEvent(p*each+i)); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("Publish: %v", err)
	}
	rec.waitN(t, s, publishers*each)
	s.flush(t, ps)
	s.flush(t, peer)
	checkSeqs(t, "subscriber", rec.all(), 0, publishers*each)
}

// Unsubscribe may be called many times, also concurrently; every call
// returns nil.
func (s *suite) unsubscribeIdempotent(t *testing.T) {
	ps := s.backend(t)
	topic := topicFor(t)
	sub := s.subscribe(t, ps, topic, func(context.Context, pubsub.Event) error { return nil })
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() { errs <- sub.Unsubscribe(s.ctx(t)) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("concurrent Unsubscribe: %v", err)
		}
	}
	if err := sub.Unsubscribe(s.ctx(t)); err != nil {
		t.Errorf("Unsubscribe again: %v", err)
	}
	// Stopped already: a call with a ctx that has ended returns what the
	// first call did, not ctx.Err() (as a select over both picks at
	// random).
	done, cancel := context.WithCancel(context.Background())
	cancel()
	for i := range 64 {
		if err := sub.Unsubscribe(done); err != nil {
			t.Fatalf("Unsubscribe with an ended ctx after the subscription stopped (call %d): %v, want nil", i+1, err)
		}
	}
	s.publish(t, ps, topic, pubsub.Event{Type: "after"})
	s.flush(t, ps)
}

// Unsubscribe cancels the handlers' ctx and returns only after they have
// returned; when its own ctx ends first it says so, and a later call waits.
func (s *suite) unsubscribeWaitsForHandlers(t *testing.T) {
	t.Run("CancelsCtx", func(t *testing.T) {
		ps := s.backend(t)
		topic := topicFor(t)
		entered := make(chan struct{}, 1)
		var returned atomic.Bool
		sub := s.subscribe(t, ps, topic, func(ctx context.Context, e pubsub.Event) error {
			defer returned.Store(true)
			entered <- struct{}{}
			<-ctx.Done()
			return nil
		})
		s.publish(t, ps, topic, pubsub.Event{Type: "blocks"})
		s.await(t, entered, "the handler to start")
		if err := sub.Unsubscribe(s.ctx(t)); err != nil {
			t.Fatalf("Unsubscribe: %v", err)
		}
		if !returned.Load() {
			t.Error("Unsubscribe returned before the handler did")
		}
	})
	t.Run("HandlerIgnoresCtx", func(t *testing.T) {
		ps := s.backend(t)
		topic := topicFor(t)
		entered := make(chan struct{}, 1)
		release := make(chan struct{})
		var returned atomic.Bool
		sub := s.subscribe(t, ps, topic, func(context.Context, pubsub.Event) error {
			defer returned.Store(true)
			entered <- struct{}{}
			<-release
			return nil
		})
		s.publish(t, ps, topic, pubsub.Event{Type: "blocks"})
		s.await(t, entered, "the handler to start")
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		if err := sub.Unsubscribe(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Unsubscribe while the handler runs on: got %v, want context.DeadlineExceeded", err)
		}
		close(release)
		if err := sub.Unsubscribe(s.ctx(t)); err != nil {
			t.Fatalf("second Unsubscribe: %v", err)
		}
		if !returned.Load() {
			t.Error("Unsubscribe returned before the handler did")
		}
	})
}

// Close cancels running handlers and waits for them; afterwards Publish,
// Subscribe and Flush return ErrClosed, Close returns nil, and Unsubscribe
// of a subscription that Close stopped returns ErrClosed, whatever its ctx,
// for a fan-out subscription and a group member alike.
func (s *suite) closedReturnsErrClosed(t *testing.T) {
	s.bothKinds(t, "Group", s.closedReturnsErrClosedKind)
}

func (s *suite) closedReturnsErrClosedKind(t *testing.T, opts ...pubsub.SubscribeOption) {
	ps := s.backend(t)
	topic := topicFor(t)
	entered := make(chan struct{}, 1)
	var returned atomic.Bool
	sub := s.subscribe(t, ps, topic, func(ctx context.Context, e pubsub.Event) error {
		defer returned.Store(true)
		entered <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	}, opts...)
	s.publish(t, ps, topic, pubsub.Event{Type: "blocks"})
	s.await(t, entered, "the handler to start")

	closed := make(chan error, 1)
	go func() { closed <- ps.Close() }()
	timer := time.NewTimer(s.c.Timeout)
	defer timer.Stop()
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("Close: %v", err)
		}
	case <-timer.C:
		t.Fatalf("Close did not return within %v", s.c.Timeout)
	}
	if !returned.Load() {
		t.Error("Close returned before the running handler did")
	}
	ctx := s.ctx(t)
	if err := ps.Publish(ctx, topic, pubsub.Event{Type: "x"}); !errors.Is(err, pubsub.ErrClosed) {
		t.Errorf("Publish after Close: got %v, want ErrClosed", err)
	}
	if _, err := ps.Subscribe(ctx, topic, func(context.Context, pubsub.Event) error { return nil }); !errors.Is(err, pubsub.ErrClosed) {
		t.Errorf("Subscribe after Close: got %v, want ErrClosed", err)
	}
	if err := ps.Flush(ctx); !errors.Is(err, pubsub.ErrClosed) {
		t.Errorf("Flush after Close: got %v, want ErrClosed", err)
	}
	if err := ps.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	// Close stopped the subscription first: ErrClosed, whatever the ctx
	// (pubsub.ErrClosed: "by Unsubscribe of a subscription that its
	// backend's Close stopped").
	if err := sub.Unsubscribe(ctx); !errors.Is(err, pubsub.ErrClosed) {
		t.Errorf("Unsubscribe after Close: got %v, want ErrClosed", err)
	}
	ended, cancel := context.WithCancel(ctx)
	cancel()
	if err := sub.Unsubscribe(ended); !errors.Is(err, pubsub.ErrClosed) {
		t.Errorf("Unsubscribe after Close with an ended ctx: got %v, want ErrClosed", err)
	}
}

// A new member subscribing with ClaimPending takes over the deliveries other
// members hold unacked, whether their member is still running them or is
// gone, and receives them first, in publish order, as redeliveries, before
// the events nobody has taken yet. The ack deadline is a minute: only the
// claim can explain the redeliveries within the suite's timeout.
func (s *suite) claimPendingTakesOverInOrder(t *testing.T) {
	const deadline = time.Minute
	run := func(t *testing.T, memberGone bool) {
		ps := s.backend(t)
		peer := s.peer(t, ps)
		topic := topicFor(t)
		entered := make(chan struct{}, 3)
		// The first member reads no further ahead than its 3 handlers
		// (ClaimPending's read-ahead rule; it has nothing to claim), so
		// events 4 and 5 stay untaken for the heir: a member that reads
		// ahead could take them after the heir's claim, at whatever moment
		// its read comes (legitimately: it is a live member), and hold them
		// in its queue until the ack deadline.
		first := s.subscribe(t, peer, topic, func(ctx context.Context, e pubsub.Event) error {
			entered <- struct{}{}
			<-ctx.Done() // never acks
			return ctx.Err()
		}, pubsub.Group("g"), pubsub.AckDeadline(deadline), pubsub.Concurrency(3), pubsub.ClaimPending())
		s.publishSeq(t, ps, topic, 1, 4)
		for range 3 {
			s.await(t, entered, "the first member taking events 1..3")
		}
		s.publishSeq(t, ps, topic, 4, 6)
		if memberGone {
			if peer != ps {
				// Another process's backend goes away: the way a process dies.
				if err := peer.Close(); err != nil {
					t.Fatalf("Close of peer: %v", err)
				}
			} else if err := first.Unsubscribe(s.ctx(t)); err != nil {
				t.Fatalf("Unsubscribe: %v", err)
			}
		}
		rec := newRecorder()
		s.subscribe(t, ps, topic, rec.handler("heir"),
			pubsub.Group("g"), pubsub.AckDeadline(deadline), pubsub.ClaimPending())
		ds := rec.waitN(t, s, 5)
		var got []int
		for _, d := range ds {
			got = append(got, seqOf(d.e))
		}
		if fmt.Sprint(got[:5]) != "[1 2 3 4 5]" {
			t.Fatalf("claiming member got events %v, want [1 2 3 4 5] in that order", got)
		}
		for _, d := range ds[:3] {
			if d.e.DeliveryAttempt < 2 {
				t.Errorf("claimed event %d has DeliveryAttempt %d, want at least 2", seqOf(d.e), d.e.DeliveryAttempt)
			}
		}
	}
	t.Run("MemberRunning", func(t *testing.T) { run(t, false) })
	t.Run("MemberGone", func(t *testing.T) { run(t, true) })
}

// Each delivery gets its own copy of the event: two subscriptions (two
// groups) on one topic, whose handlers change their event's Data and
// Metadata and nack the first attempt, each see every attempt as published.
func (s *suite) handlerOwnsItsCopy(t *testing.T) {
	run := func(t *testing.T, opts ...pubsub.SubscribeOption) {
		ps := s.backend(t)
		topic := topicFor(t)
		const n = 50
		var (
			mu     sync.Mutex
			dirty  []string
			done   = map[string]int{}
			all    = make(chan struct{})
			closed bool
		)
		h := func(member string) pubsub.Handler {
			return func(_ context.Context, e pubsub.Event) error {
				clean := len(e.Metadata) == 1 && e.Metadata["k"] == "v" && string(e.Data) == `{"x":1}`
				// Scribble on this copy.
				if e.Metadata != nil {
					e.Metadata["k"] = member
					e.Metadata[member] = "x"
				}
				if len(e.Data) > 0 {
					e.Data[0] = 'X'
				}
				mu.Lock()
				defer mu.Unlock()
				if !clean {
					dirty = append(dirty, fmt.Sprintf("%s got %s attempt %d with Metadata %v, Data %s", member, e.ID, e.DeliveryAttempt, e.Metadata, e.Data))
				}
				if e.DeliveryAttempt == 1 {
					return fmt.Errorf("attempt 1 fails")
				}
				done[member]++
				if !closed && done["a"] >= n && done["b"] >= n {
					closed = true
					close(all)
				}
				return nil
			}
		}
		fast := pubsub.RedeliveryDelay(time.Millisecond)
		if len(opts) > 0 { // groups: one member each
			s.subscribe(t, ps, topic, h("a"), fast, pubsub.Group("ga"))
			s.subscribe(t, ps, topic, h("b"), fast, pubsub.Group("gb"))
		} else {
			s.subscribe(t, ps, topic, h("a"), fast)
			s.subscribe(t, ps, topic, h("b"), fast)
		}
		for i := range n {
			s.publish(t, ps, topic, pubsub.Event{ID: fmt.Sprint("e", i), Type: "t",
				Data: json.RawMessage(`{"x":1}`), Metadata: map[string]string{"k": "v"}})
		}
		select {
		case <-all:
		case <-time.After(s.c.Timeout):
			mu.Lock()
			defer mu.Unlock()
			t.Fatalf("within %v: a handled %d, b %d of %d events", s.c.Timeout, done["a"], done["b"], n)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(dirty) > 0 {
			t.Fatalf("%d deliveries carried another delivery's changes, first: %s", len(dirty), dirty[0])
		}
	}
	s.bothKinds(t, "Groups", run)
}

// A group member that stops gives its events back "once its handlers have
// returned" (package doc, Groups): an event whose handler still runs after
// Unsubscribe cancelled its ctx is not given to another member meanwhile,
// and when that handler then returns nil the event is acked, not run again
// (review h57: inmem gave it to the other member at once, and it ran
// twice though nothing failed).
func (s *suite) stopGivesBackAfterHandlers(t *testing.T) {
	ps := s.backend(t)
	topic := topicFor(t)
	started, cancelled, release := make(chan struct{}), make(chan struct{}), make(chan struct{})
	a := s.subscribe(t, ps, topic, func(ctx context.Context, e pubsub.Event) error {
		close(started)
		<-ctx.Done() // Unsubscribe began
		close(cancelled)
		<-release // finishes its work, then acks
		return nil
	}, pubsub.Group("g"), pubsub.AckDeadline(time.Minute))
	s.publish(t, ps, topic, pubsub.Event{Type: "work"})
	s.await(t, started, "member A to start the event")
	gotB := make(chan pubsub.Event, 4)
	s.subscribe(t, ps, topic, func(_ context.Context, e pubsub.Event) error {
		gotB <- e
		return nil
	}, pubsub.Group("g"), pubsub.AckDeadline(time.Minute))
	unsubbed := make(chan error, 1)
	go func() { unsubbed <- a.Unsubscribe(context.Background()) }()
	s.await(t, cancelled, "member A's handler ctx to end")
	select {
	case e := <-gotB:
		close(release)
		t.Fatalf("member B got event %s (attempt %d) while member A's handler still ran it", e.ID, e.DeliveryAttempt)
	case <-time.After(time.Second):
	}
	close(release)
	select {
	case err := <-unsubbed:
		if err != nil {
			t.Fatalf("Unsubscribe: %v", err)
		}
	case <-time.After(s.c.Timeout):
		t.Fatalf("Unsubscribe had not returned %v after the handler did", s.c.Timeout)
	}
	s.flush(t, ps)
	select {
	case e := <-gotB:
		t.Fatalf("member B got event %s (attempt %d), which member A's handler acked", e.ID, e.DeliveryAttempt)
	case <-time.After(200 * time.Millisecond):
	}
}

// A nacked event waits RedeliveryDelay before it is delivered again
// (package doc, "Delivery policy"), also when the member that nacked it
// had claimed it (ClaimPending) from a member whose handler still hangs
// on it: the older attempt does not make the newer one's nack wait for an
// ack deadline (review h57: inmem redelivered it only after the claimer's
// AckDeadline, a minute here). The bound, 10s, is a thousand times the
// delay.
func (s *suite) claimerNackWaitsRedeliveryDelay(t *testing.T) {
	ps := s.backend(t)
	topic := topicFor(t)
	started := make(chan struct{}, 1)
	s.subscribe(t, ps, topic, func(ctx context.Context, e pubsub.Event) error {
		select {
		case started <- struct{}{}:
		default:
		}
		<-ctx.Done() // hangs until A is unsubscribed
		return ctx.Err()
	}, pubsub.Group("g"), pubsub.AckDeadline(time.Minute))
	s.publish(t, ps, topic, pubsub.Event{Type: "work"})
	s.await(t, started, "member A to start the event")
	attempts := make(chan int, 8)
	var calls atomic.Int32
	s.subscribe(t, ps, topic, func(_ context.Context, e pubsub.Event) error {
		attempts <- e.DeliveryAttempt
		if calls.Add(1) == 1 {
			return errors.New("first try on B fails")
		}
		return nil
	}, pubsub.Group("g"), pubsub.AckDeadline(time.Minute), pubsub.RedeliveryDelay(10*time.Millisecond), pubsub.ClaimPending())
	var first int
	select {
	case first = <-attempts:
	case <-time.After(s.c.Timeout):
		t.Fatalf("member B (ClaimPending) did not get the event member A holds within %v", s.c.Timeout)
	}
	select {
	case again := <-attempts:
		if again != first+1 {
			t.Errorf("B's redelivery is attempt %d, want %d", again, first+1)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("B nacked attempt %d with RedeliveryDelay 10ms and got no redelivery within 10s (its AckDeadline is a minute)", first)
	}
}
