package redisstreams_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
	"github.com/leasebus/leasebus/redisstreams"
)

// syncBuf is a bytes.Buffer safe for a logger and the test at once.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestReviewH72BlackHoledMemberRunsTakenOverEvents: member A (its own
// NewURL Backend behind a proxy, AckDeadline 2s) reads ahead 257 of a
// backlog of 300 events while its one handler is stuck on the first; A is
// then black-holed (connections open, nothing answers). A live member B
// (another NewURL Backend) takes every event over and runs it. Once A's
// pass has tried, in the hole, to hand back the entries queued behind its
// stuck handler (and failed), the hole heals and A's handler returns.
//
// The docs allow A to finish the event its handler was running past the
// ack deadline (pubsub.AckDeadline: "may see its event delivered again
// elsewhere"), nothing more: the events it read ahead and never started
// were taken over by B, and B ran each. A must not start any of them.
//
// Found by review h72: A ran 256 such events right after the heal (2 of 2
// runs; 10 in an earlier variant with events of 1 MiB), each a second run
// of an event B had run and acked; the hand-back failed 21s into the hole. The failed hand-back put
// them back in A's local queue (handBackQueued), and a handler starts a
// queued entry without asking whether it is still pending on its consumer
// (process), however long ago its claim was last refreshed.
func TestReviewH72BlackHoledMemberRunsTakenOverEvents(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	proxy := redistest.NewProxy(t, srv.Addr())
	logs := &syncBuf{}
	a, err := redisstreams.NewURL(ctx, "redis://"+proxy.Addr(), redisstreams.Options{
		Prefix: "h72bh", Logger: slog.New(slog.NewTextHandler(logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	bb, err := redisstreams.NewURL(ctx, srv.URL(), redisstreams.Options{Prefix: "h72bh"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bb.Close() })
	const n = 300
	for i := range n {
		if err := bb.Publish(ctx, "t", pubsub.Event{ID: fmt.Sprint("e", i), Type: "x"}); err != nil {
			t.Fatal(err)
		}
	}
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	var mu sync.Mutex
	var aRan []string
	var healed atomic.Bool
	var aAfter []string
	subA, err := a.Subscribe(ctx, "t", func(_ context.Context, e pubsub.Event) error {
		mu.Lock()
		aRan = append(aRan, e.ID)
		if healed.Load() {
			aAfter = append(aAfter, e.ID)
		}
		mu.Unlock()
		select {
		case started <- struct{}{}:
		default:
		}
		<-release
		return nil
	}, pubsub.Group("g"), pubsub.StartFrom(pubsub.Earliest), pubsub.AckDeadline(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	<-started
	admin := srv.Client(t)
	deadline := time.Now().Add(10 * time.Second)
	for {
		cs, err := admin.XInfoConsumers(ctx, "h72bh:{t}", "g").Result()
		if err == nil && len(cs) == 1 && cs[0].Pending >= 250 {
			t.Logf("member A holds %d entries", cs[0].Pending)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("member A did not read ahead 250 entries in 10s: %v %v", cs, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	proxy.BlackHole()
	holeAt := time.Now()

	got := map[string]int{}
	subB, err := bb.Subscribe(ctx, "t", func(_ context.Context, e pubsub.Event) error {
		mu.Lock()
		got[e.ID]++
		mu.Unlock()
		return nil
	}, pubsub.Group("g"), pubsub.AckDeadline(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	const failed = "handing back the entries queued behind stuck handlers failed"
	deadline = time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		k := len(got)
		mu.Unlock()
		if k >= n && strings.Contains(logs.String(), failed) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("30s after the hole: B ran %d of %d; A's failed hand-back logged: %v", k, n, strings.Contains(logs.String(), failed))
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("B ran all %d events and A's hand-back failed %v after the hole", n, time.Since(holeAt).Round(time.Millisecond))
	healed.Store(true)
	proxy.Restore()
	close(release)
	time.Sleep(2 * time.Second) // A's handler is free: let it run what it would
	if err := subA.Unsubscribe(ctx); err != nil {
		t.Logf("A's Unsubscribe: %v", err)
	}
	if err := subB.Unsubscribe(ctx); err != nil {
		t.Errorf("B's Unsubscribe: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	var dups []string
	for id, c := range got {
		if c > 1 {
			dups = append(dups, id)
		}
	}
	slices.Sort(dups)
	t.Logf("B ran %d of %d events, %d more than once; A ran %d, of which %d after the heal", len(got), n, len(dups), len(aRan), len(aAfter))
	if len(dups) > 0 {
		t.Errorf("%d events ran more than once on the live member, whose handler returned nil each time: %v", len(dups), dups)
	}
	if len(aAfter) > 0 {
		t.Errorf("the black-holed member started %d events after the hole healed, each taken over and run by the live member already: %v", len(aAfter), aAfter[:min(len(aAfter), 5)])
	}
}
