package signals_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasebus/leasebus/pubsub"
	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

// TestTidyWakesAnInboxLeftUnread: a tenure whose drained inbox could not
// be deleted (the server did not answer) leaves the thread to the
// runtime's tidying. If a signal came into the inbox meanwhile that no
// notice will bring a tenure to (its Send failed after storing it, or its
// notice was lost with a master that failed over, as
// TestClusterFailoverUnderLoad once saw: "inbox of short-13: 0 pending, 1
// unread" 30s after every signal was given), the tidying takes the free
// thread and runs it, as a releasing tenure does. Before, it found the
// inbox not drained and forgot the thread: the signal stayed unread.
func TestTidyWakesAnInboxLeftUnread(t *testing.T) {
	srv, _ := startRedis(t)
	b, err := redisstreams.NewURL(t.Context(), srv.URL(), redisstreams.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	got := make(chan string, 4)
	rt := newRuntime(t, b, func(ctx context.Context, run *signals.Run) error {
		for _, s := range run.Signals {
			got <- s.ID
		}
		return nil
	})
	// The signal alone, with no notice.
	if err := b.PublishFor(t.Context(), signals.InboxTopic("th"), signals.InboxGroup, pubsub.Event{ID: "s1", Type: "msg"}); err != nil {
		t.Fatal(err)
	}
	rt.TidyLater("th")
	select {
	case id := <-got:
		if id != "s1" {
			t.Fatalf("ran %q, want s1", id)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the signal left unread in the inbox did not run within 20s of the tidying")
	}
}
