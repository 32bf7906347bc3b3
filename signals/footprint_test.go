package signals_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

// footprintKeys are the only keys a runtime may leave under its prefix
// ("fp") once every thread is idle past the idle window: the shared work
// topic and the control topic (when a control event was ever published),
// whatever the number of threads that ran, besides the read guard of each
// live runtime's work-group subscription (workGuardPrefix, redisstreams),
// which goes as the runtime closes. A set, not a count: a count of two let
// a leaked inbox through when no control event had been published.
var footprintKeys = []string{"fp:{" + signals.WorkTopic + "}", "fp:{" + signals.ControlTopic + "}"}

// workGuardPrefix starts the key of a live runtime's read guard of its
// work-group subscription.
const workGuardPrefix = "fp:{" + signals.WorkTopic + "}:rguard:"

// onlyFootprint reports whether every key is one of footprintKeys, or the
// work-group read guard of one of at most live runtimes.
func onlyFootprint(keys []string, live int) bool {
	guards := 0
	for _, k := range keys {
		if strings.HasPrefix(k, workGuardPrefix) {
			guards++
			continue
		}
		if !slices.Contains(footprintKeys, k) {
			return false
		}
	}
	return guards <= live
}

// TestThreadFootprint runs many threads to completion (10,000; 1,000 with
// -short, or LEASEBUS_FOOTPRINT_THREADS) on a real redis-server through a
// NewURL client, then waits out the idle window — the dedupe window, the
// lease status window and FenceIdle, 1s each here — and counts the keys
// under the prefix: only footprintKeys, whatever the number of threads.
// Each thread's inbox went when its tenure ended drained; its done record,
// lease state records and fencing counters expired. Threads that then run
// again get tokens above every token they had before.
func TestThreadFootprint(t *testing.T) {
	n := 10_000
	if testing.Short() {
		n = 1_000
	}
	if v := os.Getenv("LEASEBUS_FOOTPRINT_THREADS"); v != "" {
		n, _ = strconv.Atoi(v)
	}
	srv, c := startRedis(t)
	ctx := context.Background()
	// BlockTime 100ms: an ending tenure's Unsubscribe can wait out its
	// blocking read (issue 11), which at the default 2s makes 10,000
	// threads take minutes.
	b, err := redisstreams.NewURL(ctx, srv.URL(), redisstreams.Options{Prefix: "fp", FenceIdle: time.Second, LeaseStatusWindow: time.Second, BlockTime: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	var (
		mu     sync.Mutex
		tokens = map[string][]uint64{}
		ran    atomic.Int64
	)
	agent := func(ctx context.Context, run *signals.Run) error {
		mu.Lock()
		tokens[run.Thread] = append(tokens[run.Thread], run.Token)
		mu.Unlock()
		ran.Add(int64(len(run.Signals)))
		for {
			if _, ok := run.Next(ctx); !ok {
				return nil
			}
			ran.Add(1)
		}
	}
	rt := newRuntime(t, b, agent, signals.WithDedupeWindow(time.Second), signals.WithLinger(time.Millisecond))

	start := time.Now()
	// Four senders at a time: each active thread still holds a pooled
	// connection for its blocking inbox read (issue 11), and this test is
	// about what threads leave behind, on go-redis's default pool.
	var g errgroup.Group
	g.SetLimit(4)
	for i := range n {
		g.Go(func() error {
			_, err := rt.Send(ctx, fmt.Sprint("t", i), signals.Signal{Type: "msg"})
			return err
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d sends took %v", n, time.Since(start).Round(time.Millisecond))
	for ran.Load() < int64(n) {
		if time.Since(start) > 5*time.Minute {
			t.Fatalf("%d of %d signals ran within 5 minutes", ran.Load(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("%d threads ran in %v", n, time.Since(start).Round(time.Millisecond))

	// The idle window: every key of every thread goes.
	idle := time.Now()
	var keys []string
	for {
		keys, err = c.Keys(ctx, "fp:*").Result()
		if err != nil {
			t.Fatal(err)
		}
		if onlyFootprint(keys, 1) {
			break
		}
		if time.Since(idle) > 30*time.Second {
			slices.Sort(keys)
			t.Fatalf("%d keys under the prefix 30s after %d threads went idle, want only %q; e.g. %q", len(keys), n, footprintKeys, keys[:min(10, len(keys))])
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("%d keys left %v after the last run: %q", len(keys), time.Since(idle).Round(time.Millisecond), keys)

	// Threads run again: every new token is above every earlier one.
	before := map[string]uint64{}
	mu.Lock()
	for i := range 20 {
		th := fmt.Sprint("t", i)
		before[th] = slices.Max(tokens[th])
	}
	mu.Unlock()
	target := ran.Load() + int64(len(before))
	for th := range before {
		if _, err := rt.Send(ctx, th, signals.Signal{Type: "msg"}); err != nil {
			t.Fatal(err)
		}
	}
	for ran.Load() < target {
		if time.Since(idle) > time.Minute {
			t.Fatalf("threads run again: %d of %d signals ran", ran.Load()-target+int64(len(before)), len(before))
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	for th, old := range before {
		if last := tokens[th][len(tokens[th])-1]; last <= old {
			mu.Unlock()
			t.Fatalf("thread %s ran again with token %d, not above its earlier %d", th, last, old)
		}
	}
	mu.Unlock()

	// The runtime's own read guard goes as it closes.
	if err := rt.Close(ctx); err != nil {
		t.Fatal(err)
	}
	guards, err := c.Keys(ctx, workGuardPrefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(guards) != 0 {
		t.Fatalf("read guards left after Close: %q", guards)
	}
}
