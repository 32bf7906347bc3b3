package main

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// TestTailGroupCountTwice: `leasebus tail TOPIC --group G --count 1` run
// twice with two events published: the first run prints the first event
// and exits; the event it was handed beyond --count goes back to the group
// as it exits, so the second run prints the second one at once, not after
// the group's ack deadline (30s by default). Found by review: the first run
// nacked it and left it pending on its consumer, and the second run printed
// it after 30.01s, as attempt 2.
func TestTailGroupCountTwice(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	url := srv.URL()
	for _, typ := range []string{"first.event", "second.event"} {
		if r := leasebus(t, 10*time.Second, "publish", "orders", "--type", typ, "--redis", url); r.code != 0 {
			t.Fatalf("publish %s: exit %d, stderr %q", typ, r.code, r.stderr)
		}
	}
	r := leasebus(t, 10*time.Second, "tail", "orders", "--group", "G", "--create-group", "--from", "earliest", "--count", "1", "--redis", url)
	if r.code != 0 || !strings.Contains(r.stdout, "first.event") || strings.Contains(r.stdout, "second.event") {
		t.Fatalf("first tail: exit %d, stdout %q, stderr %q; want first.event only", r.code, r.stdout, r.stderr)
	}
	start := time.Now()
	// The bound is the group's ack deadline less a margin: a second run
	// that got the event only from its expiry fails here.
	r = leasebus(t, pubsub.DefaultAckDeadline-5*time.Second, "tail", "orders", "--group", "G", "--count", "1", "--redis", url)
	took := time.Since(start)
	t.Logf("second tail: %v, stdout %q", took.Round(time.Millisecond), r.stdout)
	if r.code != 0 || !strings.Contains(r.stdout, "second.event") {
		t.Fatalf("second tail: exit %d, stdout %q, stderr %q; want second.event", r.code, r.stdout, r.stderr)
	}
	if took > 5*time.Second {
		t.Errorf("second tail took %v to print the event the first one left, want it at once (under 5s)", took.Round(time.Millisecond))
	}
	// Nothing is left pending in the group.
	b, err := connect(context.Background(), url, redisOptions(), os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	bl, err := b.GroupBacklog(context.Background(), "orders", "G")
	if err != nil {
		t.Fatal(err)
	}
	if bl.Pending != 0 || bl.Lag != 0 {
		t.Errorf("group backlog after the two tails: %+v, want nothing pending or unread", bl)
	}
}
