package redisstreams_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
	"github.com/leasebus/leasebus/redisstreams"
)

// TestReviewH72DeadLettersUnderManySubscriptions: one NewURL Backend
// (go-redis's default pool) carries 300 group subscriptions: two members
// of group "g" on each of 100 topics (MaxDeliveries(3), AckDeadline 1s,
// Concurrency 4) and a group on each topic's dead-letter topic. Each topic
// gets 10 events whose handler returns nil, 3 whose handler always fails
// and 2 whose first attempt runs 1.5s (past the deadline: the other member
// takes it over as attempt 2) and then succeeds. pubsub's rules: each
// failing event is dead-lettered once, after 3 attempts, and acked; the
// others are not dead-lettered; an event acked at its first attempt runs
// once; and, all done, GroupBacklog reports nothing pending or unread.
func TestReviewH72DeadLettersUnderManySubscriptions(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	b, err := redisstreams.NewURL(ctx, srv.URL(), redisstreams.Options{Prefix: "h72dl"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	const topics, ok, bad, slow = 100, 10, 3, 2
	var mu sync.Mutex
	runs := map[string]int{}
	dead := map[string][]string{} // id -> attempts metadata of each dead letter
	var subs []pubsub.Subscription
	for i := range topics {
		topic := fmt.Sprint("t", i)
		for range 2 {
			s, err := b.Subscribe(ctx, topic, func(_ context.Context, e pubsub.Event) error {
				mu.Lock()
				runs[e.ID]++
				mu.Unlock()
				switch {
				case strings.HasPrefix(e.ID, "bad"):
					return errors.New("always fails")
				case strings.HasPrefix(e.ID, "slow") && e.DeliveryAttempt == 1:
					time.Sleep(1500 * time.Millisecond)
				}
				return nil
			}, pubsub.Group("g"), pubsub.MaxDeliveries(3), pubsub.AckDeadline(time.Second), pubsub.Concurrency(4))
			if err != nil {
				t.Fatal(err)
			}
			subs = append(subs, s)
		}
		s, err := b.Subscribe(ctx, pubsub.DeadLetterTopic(topic), func(_ context.Context, e pubsub.Event) error {
			mu.Lock()
			dead[e.ID] = append(dead[e.ID], e.Metadata[pubsub.MetaDeadAttempts])
			mu.Unlock()
			return nil
		}, pubsub.Group("dl"))
		if err != nil {
			t.Fatal(err)
		}
		subs = append(subs, s)
	}
	var pubs []pubsub.Publication
	for i := range topics {
		topic := fmt.Sprint("t", i)
		add := func(kind string, n int) {
			for j := range n {
				pubs = append(pubs, pubsub.Publication{Topic: topic, Event: pubsub.Event{ID: fmt.Sprintf("%s-%d-%d", kind, i, j), Type: kind}})
			}
		}
		add("ok", ok)
		add("bad", bad)
		add("slow", slow)
	}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for k := w; k < len(pubs); k += 8 {
				if err := b.Publish(ctx, pubs[k].Topic, pubs[k].Event); err != nil {
					t.Errorf("publish %s: %v", pubs[k].Event.ID, err)
				}
			}
		})
	}
	wg.Wait()
	done := func() bool {
		for i := range topics {
			bl, err := b.GroupBacklog(ctx, fmt.Sprint("t", i), "g")
			if err != nil || bl.Pending != 0 || bl.Lag != 0 {
				return false
			}
		}
		mu.Lock()
		defer mu.Unlock()
		return len(dead) >= topics*bad
	}
	deadline := time.Now().Add(40 * time.Second)
	for !done() {
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(time.Second) // anything late
	for _, s := range subs {
		if err := s.Unsubscribe(ctx); err != nil {
			t.Errorf("Unsubscribe: %v", err)
		}
	}
	var notDrained []string
	for i := range topics {
		bl, err := b.GroupBacklog(ctx, fmt.Sprint("t", i), "g")
		if err != nil || bl.Pending != 0 || bl.Lag != 0 {
			notDrained = append(notDrained, fmt.Sprintf("t%d: %+v %v", i, bl, err))
		}
	}
	mu.Lock()
	defer mu.Unlock()
	var wrongDead, okTwice, badRuns []string
	for _, p := range pubs {
		id := p.Event.ID
		d := dead[id]
		switch p.Event.Type {
		case "bad":
			if len(d) != 1 || d[0] != "3" {
				wrongDead = append(wrongDead, fmt.Sprintf("%s dead-lettered %v", id, d))
			}
			if runs[id] > 3 {
				badRuns = append(badRuns, fmt.Sprintf("%s ran %d", id, runs[id]))
			}
		default:
			if len(d) != 0 {
				wrongDead = append(wrongDead, fmt.Sprintf("%s dead-lettered %v", id, d))
			}
			if runs[id] == 0 {
				wrongDead = append(wrongDead, id+" never ran")
			}
			if p.Event.Type == "ok" && runs[id] != 1 {
				okTwice = append(okTwice, fmt.Sprintf("%s ran %d", id, runs[id]))
			}
		}
	}
	t.Logf("%d events, %d dead letters; wrong: %d; ok run twice: %d; bad run >3: %d; not drained: %d",
		len(pubs), len(dead), len(wrongDead), len(okTwice), len(badRuns), len(notDrained))
	for _, l := range [][]string{wrongDead, okTwice, badRuns, notDrained} {
		if len(l) > 0 {
			t.Errorf("%d: %v", len(l), l[:min(len(l), 8)])
		}
	}
}
