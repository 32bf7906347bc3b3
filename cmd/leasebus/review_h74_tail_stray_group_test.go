package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/keys"
	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
	"github.com/leasebus/leasebus/redisstreams"
)

// TestReviewH74TailGroupLeavesStrayGroup: an operator's one-off look with
// "leasebus tail orders --group debug --count 1" (or a typo in --group)
// must not leave the topic's stream unbounded. redisstreams/doc.go: "No
// trim removes an entry a group has not acked, so a group that stops
// reading (or keeps no member) makes its stream grow until it catches up or
// the topic is deleted". tail --group creates the group when it does not
// exist and leaves it behind, with no member; nothing in leasebus removes
// a group short of "topics delete".
//
// Found by review h74 (2026-11-29): after one "tail stray --group oops
// --count 1", 5,000 publishes with Retention 100 left 5,000 entries (108
// without the stray group); here, 2,000 of 2,000. Now tail refuses a group
// the topic does not have (exit 1, naming the group, the topic's groups and
// --create-group), and creates one only with --create-group, saying that it
// stays.
func TestReviewH74TailGroupLeavesStrayGroup(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	b, err := redisstreams.NewURL(context.Background(), srv.URL(), redisstreams.Options{Retention: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	if err := b.Publish(ctx, "stray", pubsub.Event{Type: "t"}); err != nil {
		t.Fatal(err)
	}
	r := leasebus(t, 20*time.Second, "tail", "stray", "--group", "oops", "--from", "earliest", "--count", "1", "--redis", srv.URL())
	if r.code != exitFailed || !strings.Contains(r.stderr, `no group "oops"`) || !strings.Contains(r.stderr, "--create-group") || r.stdout != "" {
		t.Fatalf("tail --group of a group the topic does not have: exit %d, stdout %q, stderr %q; want exit 1 naming the group and --create-group", r.code, r.stdout, r.stderr)
	}
	const n = 2000
	for range n {
		if err := b.Publish(ctx, "stray", pubsub.Event{Type: "t"}); err != nil {
			t.Fatal(err)
		}
	}
	space, err := keys.NewSpace(redisstreams.DefaultPrefix)
	if err != nil {
		t.Fatal(err)
	}
	length, err := b.Client().XLen(ctx, space.Stream("stray")).Result()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d entries kept after %d publishes with Retention 100", length, n)
	if length > n/2 {
		t.Errorf("after a one-off tail --group, the stream keeps %d of %d entries (Retention 100): the group it left behind holds back every trim", length, n)
	}
}

// TestTailCreateGroup: tail --group G --create-group creates G when the
// topic has no such group, and says it stays; a second run joins it without
// the flag; --create-group without --group is a usage error.
func TestTailCreateGroup(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	url := srv.URL()
	if r := leasebus(t, 10*time.Second, "publish", "orders", "--type", "first.event", "--redis", url); r.code != 0 {
		t.Fatalf("publish: exit %d, stderr %q", r.code, r.stderr)
	}
	r := leasebus(t, 10*time.Second, "tail", "orders", "--create-group", "--redis", url)
	if r.code != exitUsage || !strings.Contains(r.stderr, "--create-group needs --group") {
		t.Fatalf("--create-group alone: exit %d, stderr %q", r.code, r.stderr)
	}
	r = leasebus(t, 10*time.Second, "tail", "orders", "--group", "G", "--create-group", "--from", "earliest", "--count", "1", "--redis", url)
	if r.code != 0 || !strings.Contains(r.stdout, "first.event") || !strings.Contains(r.stderr, "creating group G on orders: it stays") {
		t.Fatalf("tail --create-group: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if r := leasebus(t, 10*time.Second, "publish", "orders", "--type", "second.event", "--redis", url); r.code != 0 {
		t.Fatalf("publish: exit %d, stderr %q", r.code, r.stderr)
	}
	r = leasebus(t, 10*time.Second, "tail", "orders", "--group", "G", "--count", "1", "--redis", url)
	if r.code != 0 || !strings.Contains(r.stdout, "second.event") || strings.Contains(r.stderr, "creating group") {
		t.Fatalf("tail --group of the existing group: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	r = leasebus(t, 10*time.Second, "tail", "orders", "--group", "H", "--redis", url)
	if r.code != exitFailed || !strings.Contains(r.stderr, "its groups: G") {
		t.Fatalf("tail --group H: exit %d, stderr %q; want exit 1 listing the topic's groups", r.code, r.stderr)
	}
}
