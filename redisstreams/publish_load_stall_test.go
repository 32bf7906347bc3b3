package redisstreams

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// TestPublishCtxEndsUnderLoadOnStalledServer: Publish's doc (and
// pubsub.Publisher's) says it returns ctx.Err() (wrapped) when ctx ends
// first. Under load most publishes go through the coalescing combiner
// (pubQ), where a queued caller may be handed a batch to lead. Here: a
// NewURL client (go-redis defaults, honours ctx deadlines), 32 publishers
// on one ctx; the server is stopped (SIGSTOP), and 200ms later the ctx is
// cancelled. Every Publish must return within 1s of that. (With one shared
// deadline instead, every caller gives up at the same instant and no batch
// is handed on in between: that passes, hence OwnDeadlines.)
//
// Found by review (rev2, 2026-11-27): the last publisher came back 35.0s
// after the cancel, and with deadlines of their own, one call 34.9s after
// its deadline (3 of 3 each). A caller handed a batch sent it itself on
// context.Background (sendBatch), and a lone leader sent on a cancelled ctx
// that go-redis does not watch while blocked. Now, on a ctx that can end,
// the leader sends from a goroutine of its own, which keeps the turn while
// publishes queue (publishUnit, sendQueued), as the lease calls do since
// TestCancelledCallsUnderLoadOnStalledServer.
func TestPublishCtxEndsUnderLoadOnStalledServer(t *testing.T) {
	t.Run("Cancel", func(t *testing.T) { publishCtxEndsUnderLoad(t, false) })
	// Each Publish with a deadline of its own (300ms), as a server handler
	// would give it: leaders give up at their deadlines, one by one, and
	// hand the queue on; a batch handed on is sent on context.Background.
	t.Run("OwnDeadlines", publishOwnDeadlinesUnderLoad)
}

func publishOwnDeadlinesUnderLoad(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	b := urlBackend(t, srv.URL(), Options{})
	const publishers, perCall = 32, 300 * time.Millisecond
	var stopAt time.Time
	var mu sync.Mutex
	var worst time.Duration
	var calls, late int
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range publishers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			topic := fmt.Sprintf("pl%d", i%4)
			for time.Now().Before(stopAt) {
				pctx, cancel := context.WithTimeout(ctx, perCall)
				dl, _ := pctx.Deadline()
				_ = b.Publish(pctx, topic, pubsub.Event{Type: "x", Data: []byte("d")})
				cancel()
				over := time.Since(dl)
				mu.Lock()
				calls++
				if over > worst {
					worst = over
				}
				if over > time.Second {
					late++
				}
				mu.Unlock()
			}
		}()
	}
	stopAt = time.Now().Add(2 * time.Second) // 500ms of load, 1.5s of stall
	close(start)
	time.Sleep(500 * time.Millisecond)
	srv.Pause(t)
	resumed := false
	defer func() {
		if !resumed {
			srv.Resume(t)
		}
	}()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(90 * time.Second):
		t.Fatal("publishers still running 90s after the stall")
	}
	srv.Resume(t)
	resumed = true
	t.Logf("%d calls; %d returned more than 1s after their own %v deadline; the latest %v after it", calls, late, perCall, worst.Round(time.Millisecond))
	if worst > time.Second {
		t.Errorf("a Publish returned %v after its ctx deadline on a stalled server, want within 1s", worst.Round(time.Millisecond))
	}
}

func publishCtxEndsUnderLoad(t *testing.T, deadline bool) {
	n, d := ctxEndsUnderStall(t, deadline, false, 32, "publishUnit", func(b *Backend, ctx context.Context, i int) error {
		return b.Publish(ctx, fmt.Sprintf("pl%d", i%4), pubsub.Event{Type: "x", Data: []byte("d")})
	})
	t.Logf("%d publishes before the stall; last publisher returned %v after the ctx ended", n, d.Round(time.Millisecond))
	if d > time.Second {
		t.Errorf("a Publish returned %v after its ctx ended on a stalled server, want within 1s", d.Round(time.Millisecond))
	}
}
