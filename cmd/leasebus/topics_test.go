package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/keys"
	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/redisstreams"
)

// TestTopicsDelete publishes to a topic that has a consumer group, deletes it
// with "leasebus topics delete", and finds its stream (events and group)
// gone; bad arguments exit 2; deleting a topic that does not exist exits 1
// unless --missing-ok.
func TestTopicsDelete(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no subcommand", []string{"topics", "--redis", "redis://127.0.0.1:1"}, "want the subcommand delete"},
		{"unknown subcommand", []string{"topics", "list", "--redis", "redis://127.0.0.1:1"}, "want the subcommand delete"},
		{"no topic", []string{"topics", "delete", "--redis", "redis://127.0.0.1:1"}, "want one TOPIC"},
		{"two topics", []string{"topics", "delete", "a", "b", "--redis", "redis://127.0.0.1:1"}, "want one TOPIC"},
		{"no redis", []string{"topics", "delete", "a"}, "no Redis server"},
		{"bad topic", []string{"topics", "delete", "", "--redis", "redis://127.0.0.1:1"}, "TOPIC is empty"},
		{"bad keyspace", []string{"topics", "delete", "a", "--keyspace", "x{y}", "--redis", "redis://127.0.0.1:1"}, "--keyspace \"x{y}\""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := leasebus(t, 10*time.Second, tc.args...)
			if r.code != exitUsage || !strings.Contains(r.stderr, tc.want) || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
				t.Fatalf("exit %d, stderr %q; want exit %d and one line with %q", r.code, r.stderr, exitUsage, tc.want)
			}
		})
	}

	srv := redistest.Start(t, redistest.Options{})
	url := srv.URL()
	r := leasebus(t, 10*time.Second, "publish", "orders", "--type", "order.created", "--redis", url)
	if r.code != 0 {
		t.Fatalf("publish: exit %d, stderr %q", r.code, r.stderr)
	}
	c := srv.Client(t)
	ctx := context.Background()
	space, err := keys.NewSpace(redisstreams.DefaultPrefix)
	if err != nil {
		t.Fatal(err)
	}
	key := space.Stream("orders")
	if n, err := c.XLen(ctx, key).Result(); err != nil || n != 1 {
		t.Fatalf("XLEN %s = %d, %v; want 1", key, n, err)
	}
	if err := c.XGroupCreate(ctx, key, "workers", "0").Err(); err != nil {
		t.Fatal(err)
	}
	r = leasebus(t, 10*time.Second, "topics", "delete", "orders", "--redis", url)
	if r.code != 0 || !strings.Contains(r.stdout, "deleted topic orders") {
		t.Fatalf("topics delete: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if n, err := c.Exists(ctx, key).Result(); err != nil || n != 0 {
		t.Fatalf("EXISTS %s after delete = %d, %v; want 0", key, n, err)
	}
	// Deleting again (or a mistyped topic) must not say "deleted": it exits 1
	// naming the topic, the keyspace and the key, unless --missing-ok.
	r = leasebus(t, 10*time.Second, "topics", "delete", "orders", "--redis", url)
	if r.code != exitFailed || r.stdout != "" ||
		!strings.Contains(r.stderr, "no topic orders under keyspace "+redisstreams.DefaultPrefix) ||
		!strings.Contains(r.stderr, key) || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
		t.Fatalf("second delete: exit %d, stdout %q, stderr %q; want exit %d and one line naming the topic, keyspace and key",
			r.code, r.stdout, r.stderr, exitFailed)
	}
	r = leasebus(t, 10*time.Second, "topics", "delete", "orders", "--missing-ok", "--redis", url)
	if r.code != 0 || !strings.Contains(r.stdout, "no topic orders") || strings.Contains(r.stdout, "deleted topic") {
		t.Fatalf("second delete --missing-ok: exit %d, stdout %q, stderr %q; want exit 0 and \"no topic orders\"", r.code, r.stdout, r.stderr)
	}
	// A topic under another keyspace is not this one's.
	if r := leasebus(t, 10*time.Second, "publish", "orders", "--type", "t", "--keyspace", "other", "--redis", url); r.code != 0 {
		t.Fatalf("publish under keyspace other: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := leasebus(t, 10*time.Second, "topics", "delete", "orders", "--redis", url); r.code != exitFailed {
		t.Fatalf("delete under the default keyspace of a topic that exists only under \"other\": exit %d, stdout %q", r.code, r.stdout)
	}
	if r := leasebus(t, 10*time.Second, "topics", "delete", "orders", "--keyspace", "other", "--redis", url); r.code != 0 || !strings.Contains(r.stdout, "deleted topic orders") {
		t.Fatalf("delete under keyspace other: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}
