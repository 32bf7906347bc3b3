package redisstreams

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// TestReviewH76GroupChurnUnderLoad (the same as inmem's) holds a Backend on
// a NewURL client to the group rules of
// package pubsub under load, in one process: 4 publishers, a group whose
// members (Concurrency 3) nack some attempts, fail others as they are
// unsubscribed, and come and go, with MaxDeliveries(4). Every event must
// end acked or dead-lettered (never dropped), no event may run twice at
// once (AckDeadline is long: only one live member holds it), the runs of
// an event must have strictly increasing DeliveryAttempts, and nothing may
// run an event after its ack.
func TestReviewH76GroupChurnUnderLoad(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t, redistest.Options{})
	h76GroupChurn(t, []*Backend{urlBackend(t, srv.URL(), Options{})})
}

// TestReviewH76GroupChurnTwoBackends is TestReviewH76GroupChurnUnderLoad
// with the members on two Backends (two processes): what one hands back the
// other takes through the group's hand-back notice.
func TestReviewH76GroupChurnTwoBackends(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t, redistest.Options{})
	b := urlBackend(t, srv.URL(), Options{})
	h76GroupChurn(t, []*Backend{b, urlBackend(t, srv.URL(), Options{Prefix: b.opts.Prefix})})
}

// h76GroupChurn runs the churn of TestReviewH76GroupChurnUnderLoad on the
// Backends bs (the same deployment and prefix): members subscribe to them
// in turn; bs[0] publishes and holds the dead-letter subscription.
func h76GroupChurn(t *testing.T, bs []*Backend) {
	b := bs[0]
	ctx := context.Background()
	const topic = "review-h76-churn"
	publishers, perPublisher := 4, 500
	if testing.Short() {
		perPublisher = 150
	}
	total := publishers * perPublisher

	type state struct {
		running  int
		last     int // last DeliveryAttempt run
		outcome  string
		acked    bool
		dead     bool
		problems []string
	}
	var mu sync.Mutex
	events := map[string]*state{}
	get := func(id string) *state {
		s := events[id]
		if s == nil {
			s = &state{}
			events[id] = s
		}
		return s
	}
	var finished atomic.Int64
	handler := func(ctx context.Context, e pubsub.Event) error {
		id := e.Metadata["n"]
		mu.Lock()
		s := get(id)
		if s.running > 0 {
			s.problems = append(s.problems, fmt.Sprintf("attempt %d started while another ran", e.DeliveryAttempt))
		}
		if s.acked {
			s.problems = append(s.problems, fmt.Sprintf("attempt %d started after the ack", e.DeliveryAttempt))
		}
		if e.DeliveryAttempt <= s.last {
			s.problems = append(s.problems, fmt.Sprintf("attempt %d ran after attempt %d (%s)", e.DeliveryAttempt, s.last, s.outcome))
		}
		s.last = e.DeliveryAttempt
		s.running++
		mu.Unlock()

		time.Sleep(time.Duration(rand.IntN(1000)) * time.Microsecond)
		var err error
		switch {
		case ctx.Err() != nil:
			err = ctx.Err() // failed as it stopped: handed back
		case rand.IntN(4) == 0:
			err = errors.New("nack")
		}
		mu.Lock()
		s.running--
		s.outcome = fmt.Sprint(err)
		if err == nil && !s.acked {
			s.acked = true
			finished.Add(1)
		}
		mu.Unlock()
		return err
	}
	dead, err := b.Subscribe(ctx, pubsub.DeadLetterTopic(topic), func(_ context.Context, e pubsub.Event) error {
		mu.Lock()
		s := get(e.Metadata["n"])
		if !s.dead && !s.acked {
			finished.Add(1)
		}
		if s.dead {
			s.problems = append(s.problems, "dead-lettered twice")
		}
		s.dead = true
		mu.Unlock()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer dead.Unsubscribe(ctx)

	opts := []pubsub.SubscribeOption{pubsub.Group("g"), pubsub.Concurrency(3), pubsub.MaxDeliveries(4),
		pubsub.RedeliveryDelay(time.Millisecond), pubsub.AckDeadline(time.Hour)}
	members := make([]pubsub.Subscription, 4)
	for i := range members {
		if members[i], err = bs[i%len(bs)].Subscribe(ctx, topic, handler, opts...); err != nil {
			t.Fatal(err)
		}
	}
	stop := make(chan struct{})
	var churn sync.WaitGroup
	churn.Add(1)
	go func() { // members leave and new ones join, while events flow
		defer churn.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(300 * time.Microsecond):
			}
			k := i % len(members)
			if err := members[k].Unsubscribe(ctx); err != nil {
				t.Errorf("Unsubscribe: %v", err)
				return
			}
			s, err := bs[(i/len(members))%len(bs)].Subscribe(ctx, topic, handler, opts...)
			if err != nil {
				t.Errorf("Subscribe: %v", err)
				return
			}
			members[k] = s
		}
	}()
	var pubs sync.WaitGroup
	for p := range publishers {
		pubs.Add(1)
		go func() {
			defer pubs.Done()
			for i := range perPublisher {
				if err := b.Publish(ctx, topic, pubsub.Event{Type: "x", Metadata: map[string]string{"n": fmt.Sprint(p, "-", i)}}); err != nil {
					t.Errorf("Publish: %v", err)
					return
				}
			}
		}()
	}
	pubs.Wait()
	deadline := time.Now().Add(60 * time.Second)
	for finished.Load() < int64(total) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	close(stop)
	churn.Wait()
	for _, m := range members {
		if err := m.Unsubscribe(ctx); err != nil {
			t.Errorf("Unsubscribe: %v", err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if n := finished.Load(); n != int64(total) {
		t.Errorf("%d of %d events acked or dead-lettered within 60s", n, total)
	}
	bad := 0
	for id, s := range events {
		if len(s.problems) > 0 {
			if bad++; bad <= 10 {
				t.Errorf("event %s: %v", id, s.problems)
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d events broke a rule", bad)
	}
}

// TestReviewH76NackedEntryTakenOverAndHandedBackKeepsCounting: a member
// nacks an entry and waits out a long redelivery delay;
// meanwhile its AckDeadline (shorter) runs out, a member of another
// Backend takes the entry over, runs it as attempt 2 and is unsubscribed
// during that run, which hands it back with its 2 attempts. When the
// first member's delay ends, its claim of the entry (idle since the
// hand-back) succeeds; the attempt it then runs must be 3, not the 2 it
// counted itself from its own nack (pubsub: DeliveryAttempt counts up).
//
// With Concurrency(1) the handler itself waits out the delay (retryInPlace);
// with 2, retryLoop claims the entry once it is due.
func TestReviewH76NackedEntryTakenOverAndHandedBackKeepsCounting(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t, redistest.Options{})
	for _, n := range []int{1, 2} {
		t.Run(fmt.Sprint("Concurrency", n), func(t *testing.T) {
			h76NackedEntryTakenOver(t, srv, n)
		})
	}
}

func h76NackedEntryTakenOver(t *testing.T, srv *redistest.Server, concurrency int) {
	ctx := context.Background()
	a := urlBackend(t, srv.URL(), Options{})
	bb := urlBackend(t, srv.URL(), Options{Prefix: a.opts.Prefix})
	const topic = "review-h76-retry-count"

	attempts := make(chan string, 16)
	subA, err := a.Subscribe(ctx, topic, func(_ context.Context, e pubsub.Event) error {
		attempts <- fmt.Sprint("A", e.DeliveryAttempt)
		if e.DeliveryAttempt == 1 {
			return errors.New("nack")
		}
		return nil
	}, pubsub.Group("g"), pubsub.Concurrency(concurrency), pubsub.AckDeadline(200*time.Millisecond),
		pubsub.RedeliveryDelay(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer subA.Unsubscribe(ctx)
	if err := a.Publish(ctx, topic, pubsub.Event{Type: "x"}); err != nil {
		t.Fatal(err)
	}
	next := func() string {
		select {
		case s := <-attempts:
			return s
		case <-time.After(15 * time.Second):
			t.Fatal("timed out waiting for a delivery")
			return ""
		}
	}
	if got := next(); got != "A1" {
		t.Fatalf("first delivery %s, want A1", got)
	}
	running := make(chan struct{}, 1)
	subB, err := bb.Subscribe(ctx, topic, func(ctx context.Context, e pubsub.Event) error {
		attempts <- fmt.Sprint("B", e.DeliveryAttempt)
		running <- struct{}{}
		<-ctx.Done()
		return ctx.Err() // fails as it is unsubscribed: handed back
	}, pubsub.Group("g"), pubsub.AckDeadline(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if got := next(); got != "B2" {
		t.Fatalf("second delivery %s, want B2 (the takeover past the ack deadline)", got)
	}
	<-running
	if err := subB.Unsubscribe(ctx); err != nil {
		t.Fatal(err)
	}
	if got := next(); got != "A3" {
		t.Errorf("third delivery %s, want A3: attempt 2 ran on B already", got)
	}
}
