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

// xinfoGate holds the answer of the reader's XINFO STREAM of key, once it
// answered "no such key", until release is closed: a reply that is slow to
// come back (or a reader goroutine descheduled) while the stream is
// recreated.
type xinfoGate struct {
	key      string
	armed    atomic.Bool
	slowRead atomic.Bool
	held     chan struct{}
	release  chan struct{}
	once     sync.Once
}

func (h *xinfoGate) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *xinfoGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.slowRead.Load() && strings.EqualFold(cmd.Name(), "xread") {
			// the reader's next read takes 200ms (a slow network)
			h.slowRead.Store(false)
			time.Sleep(200 * time.Millisecond)
		}
		return next(ctx, cmd)
	}
}
func (h *xinfoGate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if !h.armed.Load() {
			return err
		}
		for _, c := range cmds {
			a := c.Args()
			if len(a) >= 3 && strings.EqualFold(c.Name(), "xinfo") && a[2] == h.key && isNoSuchKey(c.Err()) {
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

// TestFlushStreamRecreatedDuringCheck: Flush "waits until every event
// this Backend published before the call has been handled by this
// Backend's subscriptions on its topic (fan-out subscriptions: handled)".
// The topic's stream is deleted by another client; the reader's check finds
// it gone, and before it acts on that, this Backend publishes "new" (a new
// stream). The check then makes the Backend forget "new" as a Flush target
// (forgetWrites) and records its id as the subscription's floor, so Flush
// returns before "new" is handled (as soon as the reader's next read, here
// 200ms, has not yet handed "new" over). Found by review 9 of 2026-11-22
// (4 of 4 runs); now only ids up to the reset cursors are forgotten.
func TestFlushStreamRecreatedDuringCheck(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	b := urlBackend(t, srv.URL(), Options{})
	key := b.keys.Stream("t")
	h := &xinfoGate{key: key, held: make(chan struct{}), release: make(chan struct{})}
	b.client.AddHook(h)
	var oldDone, newDone atomic.Bool
	sub, err := b.Subscribe(ctx, "t", func(ctx context.Context, e pubsub.Event) error {
		if e.Type == "new" {
			time.Sleep(300 * time.Millisecond)
			newDone.Store(true)
		} else {
			oldDone.Store(true)
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
	if err := b.Flush(ctx); err != nil || !oldDone.Load() {
		t.Fatalf("first Flush = %v, old handled %v", err, oldDone.Load())
	}
	h.armed.Store(true)
	if err := srv.Client(t).Del(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-h.held:
	case <-time.After(10 * time.Second):
		t.Fatal("the reader did not check its streams within 10s")
	}
	if err := b.Publish(ctx, "t", pubsub.Event{Type: "new"}); err != nil {
		t.Fatal(err)
	}
	h.slowRead.Store(true)
	close(h.release)
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	start := time.Now()
	err = b.Flush(fctx)
	t.Logf("Flush took %v, new handled %v", time.Since(start), newDone.Load())
	if err != nil || !newDone.Load() {
		t.Fatalf("Flush = %v after %v with \"new\" handled = %v; want nil after it was handled", err, time.Since(start).Round(time.Millisecond), newDone.Load())
	}
}
