package redisstreams

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// h76FanoutInFlightAtDelete subscribes a fan-out subscription on sub's
// Backend, holds its first delivery while del's Backend deletes the topic,
// then has the handler nack it and publishes "after". It returns the type
// of the next event the subscription starts: "before" when the nacked
// delivery was delivered again, "after" when it was not.
func h76FanoutInFlightAtDelete(t *testing.T, sub, del *Backend, topic string) string {
	t.Helper()
	ctx := context.Background()
	started := make(chan string, 8)
	release := make(chan struct{})
	s, err := sub.Subscribe(ctx, topic, func(_ context.Context, e pubsub.Event) error {
		select {
		case started <- e.Type:
		default:
		}
		if e.Type == "before" && e.DeliveryAttempt == 1 {
			<-release
			return errors.New("nack")
		}
		return nil // a redelivery is acked: nothing spins
	}, pubsub.RedeliveryDelay(0))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Unsubscribe(ctx)
	next := func(what string) string {
		select {
		case got := <-started:
			return got
		case <-time.After(10 * time.Second):
			t.Fatalf("timed out waiting for %s", what)
			return ""
		}
	}
	if err := sub.Publish(ctx, topic, pubsub.Event{Type: "before"}); err != nil {
		t.Fatal(err)
	}
	if got := next("the delivery of before"); got != "before" {
		t.Fatalf("started %q, want before", got)
	}
	if err := del.DeleteTopic(ctx, topic); err != nil {
		t.Fatal(err)
	}
	close(release) // the delivery in flight finishes, unacked
	if err := sub.Publish(ctx, topic, pubsub.Event{Type: "after"}); err != nil {
		t.Fatal(err)
	}
	// One handler, RedeliveryDelay(0): a redelivery of "before" would
	// start before "after" is even read.
	return next("the subscription's next event")
}

// TestReviewH76DeleteTopicFanoutInFlightNackNotRedelivered: "a delivery in
// flight finishes, but if it is not acked it is not delivered again"
// (pubsub.TopicDeleter). A fan-out subscription redelivers a failed entry
// locally, from its own copy, and did so also after a DeleteTopic of its
// own Backend had deleted the entry.
func TestReviewH76DeleteTopicFanoutInFlightNackNotRedelivered(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t, redistest.Options{})
	b := urlBackend(t, srv.URL(), Options{})
	if got := h76FanoutInFlightAtDelete(t, b, b, "review-h76-delete-fanout"); got != "after" {
		t.Errorf("after DeleteTopic the fan-out subscription got %q again, an unacked delivery of the deleted topic; want only %q", got, "after")
	}
}

// TestReviewH76DeleteTopicByPeerFanoutRetries pins what the docs now say
// of a DeleteTopic by another Backend (another process): a fan-out
// subscription cannot tell that its topic was deleted, and retries its
// failed delivery from its own copy as usual.
func TestReviewH76DeleteTopicByPeerFanoutRetries(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t, redistest.Options{})
	b := urlBackend(t, srv.URL(), Options{})
	peer := urlBackend(t, srv.URL(), Options{Prefix: b.opts.Prefix})
	if got := h76FanoutInFlightAtDelete(t, b, peer, "review-h76-delete-fanout-peer"); got != "before" {
		t.Errorf("after a peer's DeleteTopic the fan-out subscription started %q next; want its failed delivery %q again", got, "before")
	}
}
