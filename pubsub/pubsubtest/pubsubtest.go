package pubsubtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasebus/leasebus/pubsub"
)

// DefaultTimeout bounds each wait of the suite when Config.Timeout is zero.
const DefaultTimeout = 10 * time.Second

// Features says which optional capabilities a backend has. A subtest that
// needs a capability the backend lacks is skipped, naming the Feature.
type Features struct {
	// ConsumerGroups: the backend implements pubsub.Group (competing
	// consumers, each event to exactly one member).
	ConsumerGroups bool
	// AckDeadline: the backend redelivers a group event whose member did not
	// ack it within pubsub.AckDeadline (a handler stuck past the deadline, a
	// member that went away) to another live member. Needs ConsumerGroups.
	AckDeadline bool
	// Persistent: the backend keeps published events while no subscription
	// reads them, so StartFrom(Earliest) replays them and a group that has
	// no member keeps its position and catches up when a member returns.
	Persistent bool
	// TimePrecision is how far a delivered Event.CreatedAt may be from the
	// published one (a backend that stores milliseconds says time.Millisecond).
	// Zero means exact: time.Time.Equal.
	TimePrecision time.Duration
}

// Config describes the backend under test.
type Config struct {
	// New returns a fresh, open backend for one subtest. The suite Closes it
	// in t.Cleanup (Close is idempotent, so the backend's own cleanup may
	// close it too). Required.
	New func(t *testing.T) pubsub.PubSub
	// NewPeer returns a second backend value that shares ps's store: the
	// view of another process. Group and fan-out subtests put subscribers
	// and publishers on both. The suite Closes it in t.Cleanup. Optional:
	// when nil the suite uses ps itself as its own peer. A backend that is
	// one process (inmem) may return ps.
	NewPeer func(t *testing.T, ps pubsub.PubSub) pubsub.PubSub
	// NewWithRetention returns a fresh, open backend like New, with its
	// retention option set to retention events (the suite passes
	// MinRetention). Optional: without it the subtest that proves no trim
	// removes an unacked event is skipped.
	NewWithRetention func(t *testing.T, retention int) pubsub.PubSub
	// Features turns off subtests the backend cannot pass by design.
	Features Features
	// Timeout bounds each wait for a delivery; DefaultTimeout when zero.
	// A wait that runs out fails the subtest.
	Timeout time.Duration
}

// Run runs the conformance suite against the backend c describes, as
// subtests of t named after the rule each checks (see the pubsub package
// documentation). Subtests run one after another, each on its own backend
// from c.New and on topics of its own.
func Run(t *testing.T, c Config) {
	t.Helper()
	if c.New == nil {
		t.Fatal("pubsubtest: Config.New is nil")
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	s := &suite{c: c, f: c.Features}
	type need int
	const (
		none need = iota
		groups
		deadline
		persistent
		groupsPersistent
		retention
	)
	cases := []struct {
		name string
		need need
		run  func(t *testing.T)
	}{
		{"PublishAssignsIDAndCreatedAt", none, s.publishAssignsIDAndCreatedAt},
		{"DataAndMetadataRoundTrip", none, s.dataAndMetadataRoundTrip},
		{"InvalidInput", none, s.invalidInput},
		{"FanOutEverySubscriberGetsEvery", none, s.fanOutEverySubscriberGetsEvery},
		{"FanOutStartsAfterSubscribe", none, s.fanOutStartsAfterSubscribe},
		{"SubscribeCtxBoundsOnlySetup", none, s.subscribeCtxBoundsOnlySetup},
		{"StartFromEarliest", persistent, s.startFromEarliest},
		{"UnsubscribedGetsNothingMore", none, s.unsubscribedGetsNothingMore},
		{"TopicsIndependent", none, s.topicsIndependent},
		{"GroupEachEventOnce", groups, s.groupEachEventOnce},
		{"GroupsIndependent", groups, s.groupsIndependent},
		{"GroupKeepsCheckpoint", groupsPersistent, s.groupKeepsCheckpoint},
		{"NackRedelivers", none, s.nackRedelivers},
		{"HandlerOwnsItsCopy", none, s.handlerOwnsItsCopy},
		{"PanicRedelivers", none, s.panicRedelivers},
		{"GoexitRedelivers", none, s.goexitRedelivers},
		{"AckDeadlineRedeliversFromDeadMember", deadline, s.ackDeadlineRedelivers},
		{"ClaimPendingTakesOverInOrder", groups, s.claimPendingTakesOverInOrder},
		{"MaxDeliveriesDeadLetters", none, s.maxDeliveriesDeadLetters},
		{"PanicDeadLetters", none, s.panicDeadLetters},
		{"GoexitDeadLetters", none, s.goexitDeadLetters},
		{"DeadLetterOfAnyTopic", none, s.deadLetterOfAnyTopic},
		{"MaxDeliveriesCountsUnackedDeliveries", deadline, s.maxDeliveriesCountsUnacked},
		{"RedeliveryDelayPaces", none, s.redeliveryDelayPaces},
		{"RedeliveryDelayZero", none, s.redeliveryDelayZero},
		{"NackHoldsUpNothing", groups, s.nackHoldsUpNothing},
		{"NackedGoesBackOnStop", groups, s.nackedGoesBackOnStop},
		{"StopGivesBackOnlyAfterHandlersReturn", groups, s.stopGivesBackAfterHandlers},
		{"ClaimerNackWaitsRedeliveryDelay", groups, s.claimerNackWaitsRedeliveryDelay},
		{"ReadOnDemandReadsWhatWasKicked", groups, s.readOnDemandReadsWhatWasKicked},
		{"OrderWithConcurrency1", none, s.orderWithConcurrency1},
		{"ConcurrencyN", none, s.concurrencyN},
		{"FlushWaitsForDelivery", none, s.flushWaitsForDelivery},
		{"ConcurrentPublishers", none, s.concurrentPublishers},
		{"UnsubscribeIdempotent", none, s.unsubscribeIdempotent},
		{"UnsubscribeWaitsForHandlers", none, s.unsubscribeWaitsForHandlers},
		{"ClosedReturnsErrClosed", none, s.closedReturnsErrClosed},
		{"ShutdownDrains", none, s.shutdownDrains},
		{"ShutdownStopsAtCtx", none, s.shutdownStopsAtCtx},
		{"RetentionNeverDropsUnacked", retention, s.retentionKeepsUnacked},
		{"PublishForKeepsEventsForGroup", retention, s.publishForKeepsEvents},
		{"PublishBatchInOrder", retention, s.publishBatchInOrder},
		{"EarliestAfter10000Events", groupsPersistent, s.earliestAfter10k},
		{"DeleteTopic", groupsPersistent, s.deleteTopic},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			switch {
			case (tc.need == groups || tc.need == groupsPersistent || tc.need == deadline || tc.need == retention) && !s.f.ConsumerGroups:
				t.Skip("pubsubtest: Features.ConsumerGroups is off")
			case tc.need == deadline && !s.f.AckDeadline:
				t.Skip("pubsubtest: Features.AckDeadline is off")
			case (tc.need == persistent || tc.need == groupsPersistent || tc.need == retention) && !s.f.Persistent:
				t.Skip("pubsubtest: Features.Persistent is off")
			case tc.need == retention && s.c.NewWithRetention == nil:
				t.Skip("pubsubtest: Config.NewWithRetention is nil")
			}
			tc.run(t)
		})
	}
}

// suite holds the configuration shared by the subtests.
type suite struct {
	c Config
	f Features
}

// backend returns a fresh backend, closed at cleanup.
func (s *suite) backend(t *testing.T) pubsub.PubSub {
	t.Helper()
	ps := s.c.New(t)
	if ps == nil {
		t.Fatal("pubsubtest: Config.New returned nil")
	}
	t.Cleanup(func() {
		if err := ps.Close(); err != nil {
			t.Errorf("Close at cleanup: %v", err)
		}
	})
	return ps
}

// peer returns another view of ps's store (ps itself without NewPeer).
func (s *suite) peer(t *testing.T, ps pubsub.PubSub) pubsub.PubSub {
	t.Helper()
	if s.c.NewPeer == nil {
		return ps
	}
	p := s.c.NewPeer(t, ps)
	if p == nil {
		t.Fatal("pubsubtest: Config.NewPeer returned nil")
	}
	if p != ps {
		t.Cleanup(func() {
			if err := p.Close(); err != nil {
				t.Errorf("Close of peer at cleanup: %v", err)
			}
		})
	}
	return p
}

// ctx returns a context bounded by the suite's timeout.
func (s *suite) ctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), s.c.Timeout)
	t.Cleanup(cancel)
	return ctx
}

// uniqueTopic returns a topic name no other run uses, so backends that share
// a server between tests do not see each other's events.
func uniqueTopic(name string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "pubsubtest." + name + "." + hex.EncodeToString(b[:])
}

func topicFor(t *testing.T) string {
	name := t.Name()
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		name = name[i+1:]
	}
	return uniqueTopic(name)
}

// subscribe subscribes h and unsubscribes it at cleanup.
func (s *suite) subscribe(t *testing.T, ps pubsub.PubSub, topic string, h pubsub.Handler, opts ...pubsub.SubscribeOption) pubsub.Subscription {
	t.Helper()
	sub, err := ps.Subscribe(s.ctx(t), topic, h, opts...)
	if err != nil {
		t.Fatalf("Subscribe(%q): %v", topic, err)
	}
	if sub == nil {
		t.Fatalf("Subscribe(%q) returned a nil Subscription and no error", topic)
	}
	t.Cleanup(func() {
		// t.Context() is already cancelled here.
		ctx, cancel := context.WithTimeout(context.Background(), s.c.Timeout)
		defer cancel()
		if err := sub.Unsubscribe(ctx); err != nil && !errors.Is(err, pubsub.ErrClosed) {
			t.Errorf("Unsubscribe(%q) at cleanup: %v", topic, err)
		}
	})
	return sub
}

func (s *suite) publish(t *testing.T, ps pubsub.PubSub, topic string, e pubsub.Event) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), s.c.Timeout)
	defer cancel()
	if err := ps.Publish(ctx, topic, e); err != nil {
		t.Fatalf("Publish(%q, %s): %v", topic, e.Type, err)
	}
}

// publishSeq publishes events "seq" n = from..to-1 to topic, in order.
func (s *suite) publishSeq(t *testing.T, ps pubsub.PubSub, topic string, from, to int) {
	t.Helper()
	for n := from; n < to; n++ {
		s.publish(t, ps, topic, seqEvent(n))
	}
}

func (s *suite) flush(t *testing.T, ps pubsub.PubSub) {
	t.Helper()
	if err := ps.Flush(s.ctx(t)); err != nil {
		t.Fatalf("Flush: %v", err)
	}
}

// await waits for ch to close or receive, failing after the timeout.
func (s *suite) await(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	timer := time.NewTimer(s.c.Timeout)
	defer timer.Stop()
	select {
	case <-ch:
	case <-timer.C:
		t.Fatalf("timed out after %v waiting for %s", s.c.Timeout, what)
	}
}

// seqEvent returns event number n: Type "seq", Data {"n":n}.
func seqEvent(n int) pubsub.Event {
	return pubsub.Event{Type: "seq", Data: json.RawMessage(`{"n":` + strconv.Itoa(n) + `}`)}
}

// seqOf returns the number of a seqEvent, or -1.
func seqOf(e pubsub.Event) int {
	var v struct{ N *int }
	if e.Type != "seq" || json.Unmarshal(e.Data, &v) != nil || v.N == nil {
		return -1
	}
	return *v.N
}

// delivery is one handler call a recorder saw.
type delivery struct {
	member string
	e      pubsub.Event
}

// recorder collects deliveries and lets the test wait for them.
type recorder struct {
	mu      sync.Mutex
	got     []delivery
	changed chan struct{}
}

func newRecorder() *recorder { return &recorder{changed: make(chan struct{})} }

func (r *recorder) add(member string, e pubsub.Event) {
	r.mu.Lock()
	r.got = append(r.got, delivery{member, e})
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
}

// handler records each delivery as member's and acks it.
func (r *recorder) handler(member string) pubsub.Handler {
	return func(_ context.Context, e pubsub.Event) error {
		r.add(member, e)
		return nil
	}
}

// all returns a copy of the deliveries so far.
func (r *recorder) all() []delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]delivery(nil), r.got...)
}

// events returns the events delivered so far.
func (r *recorder) events() []pubsub.Event {
	ds := r.all()
	es := make([]pubsub.Event, len(ds))
	for i, d := range ds {
		es[i] = d.e
	}
	return es
}

// waitFor waits until cond holds for the deliveries so far.
func (r *recorder) waitFor(t *testing.T, s *suite, what string, cond func([]delivery) bool) []delivery {
	t.Helper()
	timer := time.NewTimer(s.c.Timeout)
	defer timer.Stop()
	for {
		r.mu.Lock()
		got := append([]delivery(nil), r.got...)
		ch := r.changed
		r.mu.Unlock()
		if cond(got) {
			return got
		}
		select {
		case <-ch:
		case <-timer.C:
			t.Fatalf("timed out after %v waiting for %s; got %d deliveries", s.c.Timeout, what, len(got))
		}
	}
}

// waitN waits until at least n deliveries arrived.
func (r *recorder) waitN(t *testing.T, s *suite, n int) []delivery {
	t.Helper()
	return r.waitFor(t, s, strconv.Itoa(n)+" deliveries", func(ds []delivery) bool { return len(ds) >= n })
}

// waitType waits until an event of type typ arrived.
func (r *recorder) waitType(t *testing.T, s *suite, typ string) []delivery {
	t.Helper()
	return r.waitFor(t, s, "an event of type "+typ, func(ds []delivery) bool {
		for _, d := range ds {
			if d.e.Type == typ {
				return true
			}
		}
		return false
	})
}

// waitDistinct waits until n distinct event IDs arrived.
func (r *recorder) waitDistinct(t *testing.T, s *suite, n int) []delivery {
	t.Helper()
	return r.waitFor(t, s, strconv.Itoa(n)+" distinct events", func(ds []delivery) bool {
		return len(countIDs(ds)) >= n
	})
}

func countIDs(ds []delivery) map[string]int {
	m := make(map[string]int, len(ds))
	for _, d := range ds {
		m[d.e.ID]++
	}
	return m
}

// checkSeqs checks that ds holds exactly the seq events from..to-1, each
// once, in any order.
func checkSeqs(t *testing.T, who string, ds []delivery, from, to int) {
	t.Helper()
	seen := make(map[int]int)
	for _, d := range ds {
		seen[seqOf(d.e)]++
	}
	for n := from; n < to; n++ {
		if seen[n] != 1 {
			t.Errorf("%s: event %d delivered %d times, want 1", who, n, seen[n])
		}
		delete(seen, n)
	}
	for n, c := range seen {
		t.Errorf("%s: unexpected event %d delivered %d times", who, n, c)
	}
}
