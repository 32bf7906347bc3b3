package redisstreams

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// TestReview59OddNamesRoundTrip publishes events whose ID, Type and RunID
// hold NUL, invalid UTF-8, braces and colons, with Metadata of many keys
// and of keys JSON escapes, on topics and groups with such bytes (one
// topic 64 KiB long), to a group and a fan-out subscription each; every
// event must come back as published, and DeleteTopic must leave nothing.
func TestReview59OddNamesRoundTrip(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	prefix := psPrefix()
	b, err := NewURL(ctx, srv.URL(), Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	many := map[string]string{}
	for i := range 20000 {
		many[fmt.Sprint("k", i)] = fmt.Sprint("v", i)
	}
	odd := map[string]string{"": "", "<&>": "\u2028\"\\", "\x00\x01": "\t\n", "}{:": "日本"}
	for _, topic := range []string{"t\x00{a}:b", "\xff\xfe}", "{", strings.Repeat("x{:}", 16<<10)} {
		for _, group := range []string{"g\x00{}:", "\xff"} {
			got := make(chan pubsub.Event, 4)
			fan := make(chan pubsub.Event, 4)
			gs, err := b.Subscribe(ctx, topic, func(ctx context.Context, e pubsub.Event) error { got <- e; return nil }, pubsub.Group(group))
			if err != nil {
				t.Fatal(err)
			}
			fs, err := b.Subscribe(ctx, topic, func(ctx context.Context, e pubsub.Event) error { fan <- e; return nil })
			if err != nil {
				t.Fatal(err)
			}
			for _, md := range []map[string]string{many, odd} {
				e := pubsub.Event{ID: "id\x00{\xff}:" + group, Type: "ty\x00\xfe:{}", RunID: "r\x00\xff", Data: []byte("\x00\xff not json"), Metadata: md,
					CreatedAt: time.Unix(0, 1234567891)}
				if err := b.Publish(ctx, topic, e); err != nil {
					t.Fatalf("publish on %q (len %d): %v", topic[:min(len(topic), 16)], len(topic), err)
				}
				for _, ch := range []chan pubsub.Event{got, fan} {
					select {
					case g := <-ch:
						if g.ID != e.ID || g.Type != e.Type || g.RunID != e.RunID || string(g.Data) != string(e.Data) || len(g.Metadata) != len(md) || !g.CreatedAt.Equal(e.CreatedAt) {
							t.Fatalf("got %q %q %q %q (%d metadata), want %q %q %q %q (%d)", g.ID, g.Type, g.RunID, g.Data, len(g.Metadata), e.ID, e.Type, e.RunID, e.Data, len(md))
						}
						for k, v := range md {
							if g.Metadata[k] != v {
								t.Fatalf("metadata %q = %q, want %q", k, g.Metadata[k], v)
							}
						}
					case <-time.After(10 * time.Second):
						t.Fatalf("topic len %d group %q: not delivered within 10s", len(topic), group)
					}
				}
			}
			if err := gs.Unsubscribe(ctx); err != nil {
				t.Fatal(err)
			}
			if err := fs.Unsubscribe(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.DeleteTopic(ctx, topic); err != nil {
			t.Fatal(err)
		}
	}
	if keys, _ := b.Client().Keys(ctx, prefix+"*").Result(); len(keys) != 0 {
		t.Fatalf("%d keys left after DeleteTopic of every topic, e.g. %q", len(keys), keys[0][:min(len(keys[0]), 80)])
	}
}
