package main

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/keys"
	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
	"github.com/leasebus/leasebus/redisstreams"
)

// TestReviewH77TailGroupKeyspace: tail --group looks the group up under
// --keyspace: a group a service made under its own prefix is joined
// without --create-group, and the same topic under another keyspace (where
// the group does not exist) is refused, naming --create-group, with
// nothing created there.
func TestReviewH77TailGroupKeyspace(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	url := srv.URL()
	ctx := context.Background()
	b, err := connect(ctx, url, redisstreams.Options{Prefix: "svc"}, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	sub, err := b.Subscribe(ctx, "orders", func(context.Context, pubsub.Event) error { return nil }, pubsub.Group("workers"))
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Unsubscribe(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Publish(ctx, "orders", pubsub.Event{Type: "placed"}); err != nil {
		t.Fatal(err)
	}
	r := leasebus(t, 15*time.Second, "tail", "orders", "--group", "workers", "--keyspace", "svc", "--count", "1", "--redis", url)
	if r.code != 0 || !strings.Contains(r.stdout, "placed") {
		t.Fatalf("tail --keyspace svc --group workers: exit %d, stdout %q, stderr %q; want the event", r.code, r.stdout, r.stderr)
	}
	r = leasebus(t, 15*time.Second, "tail", "orders", "--group", "workers", "--count", "1", "--redis", url)
	if r.code != 1 || !strings.Contains(r.stderr, "--create-group") {
		t.Fatalf("tail --group workers under the default keyspace: exit %d, stderr %q; want exit 1 naming --create-group", r.code, r.stderr)
	}
	space, err := keys.NewSpace(redisstreams.DefaultPrefix)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := srv.Client(t).Exists(ctx, space.Stream("orders")).Result(); err != nil || n != 0 {
		t.Errorf("the refused tail made the stream %s (exists %d, %v)", space.Stream("orders"), n, err)
	}
}
