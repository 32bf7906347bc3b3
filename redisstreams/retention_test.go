package redisstreams

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// TestTrimOnlyBelowEveryGroup drives trim.lua step by step: it removes only
// entries beyond the retention that every group has acked — never one a
// group has pending or has not been delivered yet.
func TestTrimOnlyBelowEveryGroup(t *testing.T) {
	for _, dep := range redistest.Deployments() {
		if dep.Name != "Standalone" && dep.Name != "Miniredis" {
			continue
		}
		t.Run(dep.Name, func(t *testing.T) {
			c := dep.Start(t).NewClient(t)
			b := psBackend(t, c, Options{Retention: 5})
			ctx := t.Context()
			key := b.keys.Stream("trim")
			for i := 1; i <= 100; i++ {
				if err := c.XAdd(ctx, &redis.XAddArgs{Stream: key, ID: fmt.Sprintf("%d-0", i), Values: []string{"i", fmt.Sprint(i)}}).Err(); err != nil {
					t.Fatal(err)
				}
			}
			must := func(err error) {
				t.Helper()
				if err != nil {
					t.Fatal(err)
				}
			}
			ids := func(from, to int) []string {
				var out []string
				for i := from; i <= to; i++ {
					out = append(out, fmt.Sprintf("%d-0", i))
				}
				return out
			}
			read := func(group string, n int64) {
				t.Helper()
				must(c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: group, Consumer: "c", Streams: []string{key, ">"}, Count: n}).Err())
			}
			check := func(step string, wantFirst string, wantLen int64) {
				t.Helper()
				if _, err := b.bus.trim(ctx, key); err != nil {
					t.Fatalf("%s: %v", step, err)
				}
				first, err := c.XRangeN(ctx, key, "-", "+", 1).Result()
				must(err)
				n, err := c.XLen(ctx, key).Result()
				must(err)
				if len(first) == 0 || first[0].ID != wantFirst || n != wantLen {
					t.Fatalf("%s: stream starts at %v with %d entries, want %s with %d", step, first, n, wantFirst, wantLen)
				}
			}
			// a: delivered 1..50, acked 1..30 (31..50 pending); b: created at 20.
			must(c.XGroupCreate(ctx, key, "a", "0").Err())
			must(c.XGroupCreate(ctx, key, "b", "20-0").Err())
			read("a", 50)
			must(c.XAck(ctx, key, "a", ids(1, 30)...).Err())
			check("b delivered up to 20", "21-0", 80)

			read("b", 100)
			must(c.XAck(ctx, key, "b", ids(21, 100)...).Err())
			check("a has 31..50 pending", "31-0", 70)

			must(c.XAck(ctx, key, "a", ids(31, 49)...).Err())
			check("a has 50 pending", "50-0", 51)

			must(c.XAck(ctx, key, "a", "50-0").Err())
			check("a delivered up to 50, nothing pending", "51-0", 50)

			read("a", 100)
			must(c.XAck(ctx, key, "a", ids(51, 100)...).Err())
			check("every group acked everything: retention 5", "96-0", 5)

			must(c.XGroupDestroy(ctx, key, "a").Err())
			must(c.XGroupDestroy(ctx, key, "b").Err())
			for i := 101; i <= 110; i++ {
				must(c.XAdd(ctx, &redis.XAddArgs{Stream: key, ID: fmt.Sprintf("%d-0", i), Values: []string{"i", "x"}}).Err())
			}
			check("no groups: retention 5", "106-0", 5)
		})
	}
}

// TestFailedPublishLogsNoTrimWarning: a publish that carries a trim
// (Retention 4: every publish trims) to a server that stopped answering
// (SIGSTOP) fails, and its caller gets that error; the trim in the same
// pipeline fails with it and must not add a WARN line of its own
// ("trimming a stream failed"), which a command-line tool prints as a
// second error line (cmd/leasebus TestThreadsCancelTimeoutOnStoppedRedis
// saw it once). A trim of a stream whose write succeeded is still logged
// when it fails: checkTrim.
func TestFailedPublishLogsNoTrimWarning(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	var logs syncBuffer
	b, err := NewURL(t.Context(), srv.URL(), Options{Retention: 4, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Publish(t.Context(), "trimmed", pubsub.Event{Type: "t"}); err != nil {
		t.Fatal(err)
	}
	srv.Pause(t)
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	err = b.Publish(ctx, "trimmed", pubsub.Event{Type: "t"})
	cancel()
	srv.Resume(t)
	if err == nil {
		t.Fatal("Publish to a stopped server returned nil")
	}
	if strings.Contains(logs.String(), "trimming a stream failed") {
		t.Errorf("the failed publish's trim was logged besides the error its caller got (%v):\n%s", err, logs.String())
	}
}
