package pubsubtest

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/leasebus/leasebus/pubsub"
)

// MinRetention is the smallest Retention a backend option may take (1), the
// value the suite gives Config.NewWithRetention to prove that no trim removes
// an event a group has not acked.
const MinRetention = 1

// publishMany publishes the seq events from..to-1 with a few concurrent
// publishers (in no particular order).
func (s *suite) publishMany(t *testing.T, ps pubsub.PubSub, topic string, from, to int) {
	t.Helper()
	const publishers = 8
	var wg sync.WaitGroup
	errs := make(chan error, publishers)
	for p := range publishers {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*s.c.Timeout)
			defer cancel()
			for n := from + p; n < to; n += publishers {
				if err := ps.Publish(ctx, topic, seqEvent(n)); err != nil {
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
}

// retentionKeepsUnacked: with the smallest retention, a group that has not
// acked (its one member is stuck in the handler of its first event, and has
// read nothing further) still receives every event once it goes on, however
// many were published meanwhile and acked by a fast group; so does a member
// of a third group that subscribes only afterwards on a peer (its group was
// created before the publishes, with no member).
func (s *suite) retentionKeepsUnacked(t *testing.T) {
	const n = 2_000
	ps := s.c.NewWithRetention(t, MinRetention)
	if ps == nil {
		t.Fatal("pubsubtest: Config.NewWithRetention returned nil")
	}
	t.Cleanup(func() { _ = ps.Close() })
	peer := s.peer(t, ps)
	topic := topicFor(t)

	fast, slow, idle := newRecorder(), newRecorder(), newRecorder()
	s.subscribe(t, ps, topic, fast.handler("fast"), pubsub.Group("fast"))
	release := make(chan struct{})
	var once sync.Once
	s.subscribe(t, ps, topic, func(ctx context.Context, e pubsub.Event) error {
		once.Do(func() {
			select {
			case <-release:
			case <-ctx.Done():
			}
		})
		slow.add("slow", e)
		return nil
	}, pubsub.Group("slow"), pubsub.AckDeadline(10*s.c.Timeout))
	idleSub := s.subscribe(t, peer, topic, idle.handler("idle"), pubsub.Group("idle"))
	if err := idleSub.Unsubscribe(s.ctx(t)); err != nil {
		t.Fatalf("Unsubscribe: %v", err)
	}

	s.publishMany(t, ps, topic, 0, n)
	fast.waitDistinct(t, s, n)
	// More publishes, each a chance to trim, now that the fast group has
	// acked what came before.
	s.publishMany(t, ps, topic, n, n+10)
	fast.waitDistinct(t, s, n+10)
	close(release)
	slow.waitDistinct(t, s, n+10)
	s.subscribe(t, peer, topic, idle.handler("idle"), pubsub.Group("idle"))
	idle.waitDistinct(t, s, n+10)
	s.flush(t, ps)
	s.flush(t, peer)
	checkSeqs(t, "fast group", fast.all(), 0, n+10)
	checkSeqs(t, "slow group", slow.all(), 0, n+10)
	checkSeqs(t, "group without a member during the publishes", idle.all(), 0, n+10)
}

// earliestAfter10k: a group that subscribes with StartFrom(Earliest) after
// 10,000 events were published to a topic receives all 10,000, with the
// backend's default retention (pubsub.DefaultRetention, 100,000).
func (s *suite) earliestAfter10k(t *testing.T) {
	const n = 10_000
	ps := s.backend(t)
	topic := topicFor(t)
	s.publishMany(t, ps, topic, 0, n)
	grp := newRecorder()
	s.subscribe(t, s.peer(t, ps), topic, grp.handler("late"), pubsub.Group("late"), pubsub.StartFrom(pubsub.Earliest))
	grp.waitDistinct(t, s, n)
	checkSeqs(t, "group from Earliest after 10,000 events", grp.all(), 0, n)
}

// deleteTopic: a backend with pubsub.TopicDeleter forgets a deleted topic's
// events and groups: a group of the old name starts anew, Earliest replays
// only what was published after the deletion, and a missing topic deletes
// without error.
func (s *suite) deleteTopic(t *testing.T) {
	ps := s.backend(t)
	d, ok := ps.(pubsub.TopicDeleter)
	if !ok {
		t.Skip("pubsubtest: the backend does not implement pubsub.TopicDeleter")
	}
	ctx := s.ctx(t)
	topic := topicFor(t)
	old := newRecorder()
	sub := s.subscribe(t, ps, topic, old.handler("old"), pubsub.Group("g"))
	s.publishSeq(t, ps, topic, 0, 5)
	old.waitN(t, s, 5)
	s.flush(t, ps)
	if err := sub.Unsubscribe(ctx); err != nil {
		t.Fatalf("Unsubscribe: %v", err)
	}
	s.publishSeq(t, ps, topic, 5, 10) // unread by g
	if err := d.DeleteTopic(ctx, topic); err != nil {
		t.Fatalf("DeleteTopic: %v", err)
	}
	if err := d.DeleteTopic(ctx, topic); err != nil {
		t.Fatalf("DeleteTopic of a deleted topic: %v", err)
	}
	s.publishSeq(t, ps, topic, 10, 12)
	again, fan := newRecorder(), newRecorder()
	s.subscribe(t, s.peer(t, ps), topic, again.handler("again"), pubsub.Group("g"), pubsub.StartFrom(pubsub.Earliest))
	s.subscribe(t, ps, topic, fan.handler("fan"), pubsub.StartFrom(pubsub.Earliest))
	s.publishSeq(t, ps, topic, 12, 13)
	again.waitN(t, s, 3)
	fan.waitN(t, s, 3)
	s.flush(t, ps)
	checkSeqs(t, "group after DeleteTopic", again.all(), 10, 13)
	checkSeqs(t, "fan-out from Earliest after DeleteTopic", fan.all(), 10, 13)

	if err := d.DeleteTopic(ctx, ""); !errors.Is(err, pubsub.ErrInvalid) {
		t.Errorf("DeleteTopic(\"\") = %v, want ErrInvalid", err)
	}
	if err := ps.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := d.DeleteTopic(ctx, topic); !errors.Is(err, pubsub.ErrClosed) {
		t.Errorf("DeleteTopic after Close = %v, want ErrClosed", err)
	}
}
