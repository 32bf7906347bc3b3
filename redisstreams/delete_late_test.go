package redisstreams

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// TestDeleteTopicLateReplyNoRace: a DeleteTopic whose ctx ends on a
// stopped server returns, with an error that says the deletion may have
// run; the server resumes, runs it (the stream goes), and the script's
// goroutine gets its reply; Shutdown waits for it. Review revO (helper 20),
// under -race: the goroutine wrote the results the caller's own return
// wrote too (two data races).
func TestDeleteTopicLateReplyNoRace(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	b, err := NewURL(ctx, srv.URL(), Options{Prefix: psPrefix()})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.PublishFor(ctx, "t", "g", pubsub.Event{Type: "x"}); err != nil {
		t.Fatal(err)
	}
	// The script cached first: a NOSCRIPT answered late is not followed by
	// an EVAL once the caller gave up, so that deletion would not run.
	if err := b.DeleteTopic(ctx, "other"); err != nil {
		t.Fatal(err)
	}
	srv.Pause(t)
	cctx, cancel := context.WithCancel(ctx)
	time.AfterFunc(200*time.Millisecond, cancel)
	err = b.DeleteTopic(cctx, "t")
	cancel()
	t.Logf("DeleteTopic on a stopped server: %v", err)
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "may have run") {
		t.Errorf("DeleteTopic: %v; want ctx's error, saying the deletion may have run", err)
	}
	srv.Resume(t)
	key := b.keys.Stream("t")
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		n, err := b.client.Exists(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the deletion did not run within 10s of the resume")
		}
	}
	sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
	defer scancel()
	if err := b.Shutdown(sctx); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}
