package inmem

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasebus/leasebus/pubsub"
)

// TestReviewH76GroupChurnUnderLoad holds inmem to the group rules of
// package pubsub under load, in one process: 4 publishers, a group whose
// members (Concurrency 3) nack some attempts, fail others as they are
// unsubscribed, and come and go, with MaxDeliveries(4). Every event must
// end acked or dead-lettered (never dropped), no event may run twice at
// once (AckDeadline is long: only one live member holds it), the runs of
// an event must have strictly increasing DeliveryAttempts, and nothing may
// run an event after its ack.
func TestReviewH76GroupChurnUnderLoad(t *testing.T) {
	b := New()
	defer b.Close()
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
			s.problems = append(s.problems, fmt.Sprintf("attempt %d ran after attempt %d", e.DeliveryAttempt, s.last))
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
		members[i] = mustSubscribe(t, b, topic, handler, opts...)
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
			s, err := b.Subscribe(ctx, topic, handler, opts...)
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
	deadline := time.Now().Add(30 * time.Second)
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
		t.Errorf("%d of %d events acked or dead-lettered within 30s", n, total)
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
