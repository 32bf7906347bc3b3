package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
	"github.com/leasebus/leasebus/redisstreams"
)

// TestReviewH67TailGroupUnackedNotSuccess: "tail --help": "with --group the
// command is one member of that consumer group and acks what it prints". An
// operator who takes N events off a group with "tail --group G --count N"
// (a poison message, say) reads exit 0 as "taken". When Redis stops
// answering as the acks go out, the printed events stay pending in the
// group and go to another member after the ack deadline: the command must
// not exit 0 then, and must say the events it printed may come again.
//
// Found by review h67 (2026-11-29): exit 0 with both printed events still
// pending in group g (XPENDING: 2) (3 of 3).
func TestReviewH67TailGroupUnackedNotSuccess(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	b, err := redisstreams.NewURL(ctx, srv.URL(), redisstreams.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"e1", "e2"} {
		if err := b.Publish(ctx, "o", pubsub.Event{ID: id, Type: "t"}); err != nil {
			t.Fatal(err)
		}
	}
	b.Close()
	// The group exists, as for an operator who takes events off a live
	// group (tail refuses a group the topic does not have).
	gc := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	if err := gc.XGroupCreate(ctx, "leasebus:{o}", "g", "0").Err(); err != nil {
		t.Fatal(err)
	}
	gc.Close()
	r := runBlackHoled(t, srv, "xack", 0, 60*time.Second, "tail", "o", "--group", "g", "--from", "earliest", "--count", "2")
	srv.Resume(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer c.Close()
	p, err := c.XPending(ctx, "leasebus:{o}", "g").Result()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("exit %d; pending in group g: %d", r.code, p.Count)
	if p.Count == 0 {
		t.Skip("the acks reached Redis: nothing to check")
	}
	if r.code == exitOK {
		t.Errorf("tail --group g --count 2 exited 0 with the %d events it printed still unacked (they go to another member after the ack deadline)", p.Count)
	}
	if strings.Count(r.stderr, "\n") != 2 || !strings.Contains(r.stderr, "may be delivered again") {
		t.Errorf("stderr %q; want the tailing line and one line saying the printed events may be delivered again", r.stderr)
	}
}
