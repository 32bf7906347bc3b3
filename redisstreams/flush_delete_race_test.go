package redisstreams

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// deleteGate holds the reply of DeleteTopic's script (delete_topic.lua)
// until release is closed: a reply slow to come back, or a DeleteTopic
// goroutine descheduled right after it.
type deleteGate struct {
	armed   atomic.Bool
	held    chan struct{}
	release chan struct{}
	once    sync.Once
}

func (h *deleteGate) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *deleteGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *deleteGate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if !h.armed.Load() {
			return err
		}
		for _, c := range cmds {
			a := c.Args()
			if strings.EqualFold(c.Name(), "evalsha") && len(a) > 1 && a[1] == deleteTopicScript.Hash() {
				hold := false
				h.once.Do(func() { hold = true; close(h.held) })
				if hold {
					<-h.release
				}
				break
			}
		}
		return err
	}
}

// TestFlushAfterPublishConcurrentWithDeleteTopic: one goroutine runs
// DeleteTopic; another publishes "new" after the deletion ran on the server
// (so "new" is kept: it was published after the deletion), then calls
// Flush, which "waits until every event this Backend published before the
// call has been handled by this Backend's subscriptions on its topic".
// DeleteTopic's forgetWrites, run after its script's reply came back, drops
// "new" as a Flush target, so Flush returns before "new" is handled. Found
// by review 9 of 2026-11-22 (3 of 3 runs); now DeleteTopic forgets only what
// was written before it began.
func TestFlushAfterPublishConcurrentWithDeleteTopic(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	b, err := NewURL(ctx, srv.URL(), Options{Prefix: psPrefix()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	h := &deleteGate{held: make(chan struct{}), release: make(chan struct{})}
	b.client.AddHook(h)
	var newDone atomic.Bool
	sub, err := b.Subscribe(ctx, "t", func(ctx context.Context, e pubsub.Event) error {
		if e.Type == "new" {
			time.Sleep(300 * time.Millisecond)
			newDone.Store(true)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe(ctx)
	if err := b.Publish(ctx, "t", pubsub.Event{Type: "old"}); err != nil {
		t.Fatal(err)
	}
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond) // past the millisecond of "old": one script call
	h.armed.Store(true)
	delDone := make(chan error, 1)
	go func() { delDone <- b.DeleteTopic(ctx, "t") }()
	select {
	case <-h.held:
	case <-time.After(10 * time.Second):
		t.Fatal("DeleteTopic's script not seen")
	}
	if err := b.Publish(ctx, "t", pubsub.Event{Type: "new"}); err != nil {
		t.Fatal(err)
	}
	close(h.release)
	if err := <-delDone; err != nil {
		t.Fatal(err)
	}
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	start := time.Now()
	err = b.Flush(fctx)
	if err != nil || !newDone.Load() {
		t.Fatalf("Flush = %v after %v with \"new\" handled = %v; want nil after it was handled", err, time.Since(start).Round(time.Millisecond), newDone.Load())
	}
}
