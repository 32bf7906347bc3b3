package redisstreams

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leasebus/leasebus/pubsub"
)

// TestFanOutFullMidReadLosesNothing: a fan-out subscription whose channel
// fills in the middle of a read, and whose workers drain it before the
// reader goes on to the read's next entry, gets every entry. Before, the
// reader looked at the full flag entry by entry: once the workers had
// cleared it, the next entry was handed over and the cursor jumped past
// the one that had not fit (TestFanOutBesideGroupBellGetsEverything lost
// 195 of 22,000 entries once in CI this way). The hook makes the window
// certain: the handlers wait until the channel was first found full, and
// the reader waits, after a channel was found full, until the workers
// cleared the flag.
func TestFanOutFullMidReadLosesNothing(t *testing.T) {
	_, b := startURLBackend(t)
	ctx := context.Background()
	const n = 2_000
	for i := range n {
		if err := b.Publish(ctx, "t", pubsub.Event{ID: fmt.Sprint(i), Type: "e"}); err != nil {
			t.Fatal(err)
		}
	}
	var (
		mu   sync.Mutex
		seen = map[string]bool{}
		all  = make(chan struct{})
		sub  *fanSub
	)
	var waits, cleared int
	release := make(chan struct{}) // the handlers wait until the channel was found full
	var releaseOnce sync.Once
	hook := func() {
		mu.Lock()
		f := sub
		waits++
		mu.Unlock()
		releaseOnce.Do(func() { close(release) })
		for deadline := time.Now().Add(5 * time.Second); f != nil && f.full.Load() && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
		if f != nil && !f.full.Load() {
			mu.Lock()
			cleared++
			mu.Unlock()
		}
	}
	testChannelFull.Store(&hook)
	t.Cleanup(func() { testChannelFull.Store(nil) })
	s, err := b.Subscribe(ctx, "t", func(_ context.Context, e pubsub.Event) error {
		<-release
		mu.Lock()
		defer mu.Unlock()
		if !seen[e.ID] {
			seen[e.ID] = true
			if len(seen) == n {
				close(all)
			}
		}
		return nil
	}, pubsub.StartFrom(pubsub.Earliest), pubsub.Concurrency(2))
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	sub = s.(*fanSub)
	mu.Unlock()
	select {
	case <-all:
	case <-time.After(30 * time.Second):
		mu.Lock()
		got := len(seen)
		mu.Unlock()
		t.Fatalf("the fan-out subscription got %d of %d entries (its channel was found full %d times, drained under the reader %d times)", got, n, waits, cleared)
	}
	if err := s.Unsubscribe(ctx); err != nil {
		t.Fatal(err)
	}
	testChannelFull.Store(nil)
	mu.Lock()
	defer mu.Unlock()
	if waits == 0 || cleared == 0 {
		t.Fatalf("the window was not hit: channel full %d times, drained under the reader %d times", waits, cleared)
	}
}
