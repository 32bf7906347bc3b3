package pubsubtest

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/leasebus/leasebus/pubsub"
)

// RunBacklog checks a pubsub.BacklogReader: bad input, an unknown topic, a
// topic without the group, a group with one delivery in its handler (a
// member subscribed with ClaimPending, which reads no further ahead than
// its Concurrency) and the rest not delivered, and the backlog once all
// were acked. newPS returns a fresh PubSub (closed by the caller's cleanup;
// RunBacklog closes it through io.Closer at the end when it can).
func RunBacklog(t *testing.T, newPS func(t *testing.T) pubsub.PubSub) {
	t.Helper()
	ps := newPS(t)
	br, ok := ps.(pubsub.BacklogReader)
	if !ok {
		t.Skipf("%T does not implement pubsub.BacklogReader", ps)
	}
	ctx := t.Context()
	if _, err := br.GroupBacklog(ctx, "", "g"); !errors.Is(err, pubsub.ErrInvalid) {
		t.Errorf("GroupBacklog with an empty topic = %v, want ErrInvalid", err)
	}
	if _, err := br.GroupBacklog(ctx, "t", ""); !errors.Is(err, pubsub.ErrInvalid) {
		t.Errorf("GroupBacklog with an empty group = %v, want ErrInvalid", err)
	}
	if bl, err := br.GroupBacklog(ctx, "backlog.none", "g"); err != nil || bl != (pubsub.Backlog{}) {
		t.Fatalf("GroupBacklog of an unknown topic = %+v, %v; want zero", bl, err)
	}
	const topic = "backlog.t"
	before := time.Now().Add(-time.Second)
	// The events carry a CreatedAt of their own (replayed from an archive,
	// say): LastPublished is still when they were stored (review h53:
	// inmem returned the newest event's CreatedAt).
	replayed := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)
	for range 3 {
		if err := ps.Publish(ctx, topic, pubsub.Event{Type: "x", CreatedAt: replayed}); err != nil {
			t.Fatal(err)
		}
	}
	bl, err := br.GroupBacklog(ctx, topic, "g")
	if err != nil || bl.Lag != 3 || bl.Pending != 0 || bl.LastPublished.Before(before) || bl.LastPublished.After(time.Now().Add(time.Second)) {
		t.Fatalf("GroupBacklog before the group exists = %+v, %v; want lag 3, nothing pending, a recent LastPublished (when stored, not the events' CreatedAt %v)", bl, err, replayed)
	}
	got, release := make(chan struct{}, 3), make(chan struct{})
	sub, err := ps.Subscribe(ctx, topic, func(ctx context.Context, e pubsub.Event) error {
		got <- struct{}{}
		<-release
		return nil
	}, pubsub.Group("g"), pubsub.StartFrom(pubsub.Earliest), pubsub.ClaimPending())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe(context.Background()) }()
	<-got
	if bl, err := br.GroupBacklog(ctx, topic, "g"); err != nil || bl.Pending != 1 || bl.Lag != 2 {
		t.Fatalf("GroupBacklog with one delivery in its handler = %+v, %v; want 1 pending, lag 2", bl, err)
	}
	close(release)
	deadline := time.Now().Add(10 * time.Second)
	for {
		bl, err := br.GroupBacklog(ctx, topic, "g")
		if err != nil {
			t.Fatal(err)
		}
		if bl.Pending == 0 && bl.Lag == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GroupBacklog after every event was acked = %+v, want nothing pending or lagging", bl)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := sub.Unsubscribe(ctx); err != nil {
		t.Fatal(err)
	}
	if c, ok := ps.(io.Closer); ok {
		_ = c.Close()
		if _, err := br.GroupBacklog(ctx, topic, "g"); !errors.Is(err, pubsub.ErrClosed) {
			t.Errorf("GroupBacklog after Close = %v, want ErrClosed", err)
		}
	}
}
