package signals_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

// cmdHook counts the commands a client sends (inside pipelines too) that
// its match func reports true for.
type cmdHook struct {
	redistest.RoundTrips
	n atomic.Int64
}

func newCmdHook(match func(redis.Cmder) bool) *cmdHook {
	h := &cmdHook{}
	h.Observe = func(_ context.Context, cmds []redis.Cmder, _ bool) {
		for _, c := range cmds {
			if match(c) {
				h.n.Add(1)
			}
		}
	}
	return h
}

// keyHook returns a cmdHook that counts the commands naming a key that
// contains one of markers.
func keyHook(markers ...string) *cmdHook {
	return newCmdHook(func(cmd redis.Cmder) bool {
		for _, a := range cmd.Args() {
			s, ok := a.(string)
			if !ok {
				continue
			}
			for _, m := range markers {
				if strings.Contains(s, m) {
					return true
				}
			}
		}
		return false
	})
}

// TestBusyThreadNoticesCheckedPerThread: while threads are busy in
// another runtime with many signals queued behind their runs, a runtime
// holding their wake notices checks each thread (its done record, its
// lease) about once per poll, however many of its notices it holds: one
// handler watches a thread, the others nack without a round trip
// (signals/watch.go). Before, every notice cost a check each time it came
// back (every recovery interval), so the cost grew with the backlog and a
// burst of them kept every handler slot busy (the takeover of a dead
// owner's thread then waited behind them: TestProcTakeoverBehindBigBacklog).
// Once the runs are released, every signal runs exactly once and no notice
// stays pending: followers lose nothing.
func TestBusyThreadNoticesCheckedPerThread(t *testing.T) {
	t.Parallel() // mostly waits (TTLs, windows, a stalled server): beside another (CI time)
	srv, _ := startRedis(t)
	ctx := context.Background()
	const (
		threads  = 10
		per      = 100 // queued behind each run
		recovery = 100 * time.Millisecond
		window   = 2 * time.Second
	)
	release := make(chan struct{})
	var releaseOnce sync.Once
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })
	var (
		mu   sync.Mutex
		runs = map[string]int{}
	)
	agent := func(ctx context.Context, run *signals.Run) error {
		take := func(s signals.Signal) {
			mu.Lock()
			runs[s.ID]++
			mu.Unlock()
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return eachSignal(ctx, run, take)
	}
	opts := []signals.Option{signals.WithLeaseTTL(4 * time.Second),
		signals.WithRecoveryInterval(recovery), signals.WithLinger(50 * time.Millisecond)}
	newRT := func(id string, hook redis.Hook) *signals.Runtime {
		rt, _ := urlRuntime(t, srv.URL(), "busy", id, agent, hook, opts...)
		return rt
	}
	var markers []string
	for th := range threads {
		markers = append(markers, fmt.Sprintf("signals.thread.busy%d", th), fmt.Sprintf("signals.done.busy%d", th))
	}
	hook := keyHook(markers...)
	a := newRT("A", nil)
	b := newRT("B", hook) // holds no thread: every check of its handlers names a busy thread's key
	_ = b
	for th := range threads {
		thread := fmt.Sprint("busy", th)
		for i := range per + 1 {
			if _, err := a.Send(ctx, thread, signals.Signal{ID: fmt.Sprintf("%s-%03d", thread, i), Type: "msg"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Let the first deliveries pass, then count B's checks over a window.
	time.Sleep(time.Second)
	before := hook.n.Load()
	time.Sleep(window)
	checks := hook.n.Load() - before
	cycles := int64(window / recovery)
	// Per thread and recovery interval: a watcher's check is two commands
	// (done record, acquire); allow three checks (measured: about one).
	// Checked per notice (before watch.go: 7,262 commands), the
	// ~500 notices B holds would cost 2 commands each per cycle.
	bound := int64(threads) * cycles * 3 * 2
	t.Logf("B sent %d commands naming a busy thread's keys in %v (%d threads, %d signals queued, recovery %v; bound %d)",
		checks, window, threads, threads*per, recovery, bound)
	if checks > bound {
		t.Errorf("B sent %d commands naming busy threads' keys in %v, want at most %d (checks per thread, not per notice)", checks, window, bound)
	}
	releaseOnce.Do(func() { close(release) })
	bk, err := redisstreams.NewURL(ctx, srv.URL(), redisstreams.Options{Prefix: "busy"})
	if err != nil {
		t.Fatal(err)
	}
	defer bk.Close()
	waitFor(t, 60*time.Second, "every signal ran and every notice was acked", func() bool {
		mu.Lock()
		n := len(runs)
		mu.Unlock()
		bl, err := bk.GroupBacklog(ctx, signals.WorkTopic, signals.WorkGroup)
		return err == nil && n == threads*(per+1) && bl.Pending == 0 && bl.Lag == 0
	})
	mu.Lock()
	defer mu.Unlock()
	for id, n := range runs {
		if n != 1 {
			t.Errorf("signal %s ran %d times, want 1", id, n)
		}
	}
}
