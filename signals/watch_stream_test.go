package signals_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

// TestStreamToBusyThreadChecks: a thread busy in a long run on A gets a
// steady stream of signals (one every 50ms, as a chat thread would); B holds
// their notices (A's group reads lose every race, noWorkGroup). The doc
// (signals/doc.go): a notice's first delivery costs at most about one check
// (done record, lease: two commands), shared by the notices of a thread
// that come while one handler watches it, and a thread busy elsewhere is
// then checked about once per recovery interval. Measured: 4,022 commands
// for 240 notices on f80ca3d (every notice polled for itself); review 11
// found 2,274 with the first watcher design (each follower restarted the
// watcher's 2ms poll); 378 now.
func TestStreamToBusyThreadChecks(t *testing.T) {
	t.Parallel() // mostly waits (TTLs, windows, a stalled server): beside another (CI time)
	srv, _ := startRedis(t)
	ctx := context.Background()
	const (
		threads = 4
		every   = 50 * time.Millisecond
		window  = 3 * time.Second
	)
	release := make(chan struct{})
	var releaseOnce sync.Once
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })
	agent := func(ctx context.Context, run *signals.Run) error {
		select {
		case <-release:
		case <-ctx.Done():
		}
		for {
			if _, ok := run.Next(ctx); !ok {
				return nil
			}
		}
	}
	newBE := func(hook redis.Hook) *redisstreams.Backend {
		b, err := redisstreams.NewURL(ctx, srv.URL(), redisstreams.Options{Prefix: "storm"})
		if err != nil {
			t.Fatal(err)
		}
		if hook != nil {
			b.Client().AddHook(hook)
		}
		t.Cleanup(func() { _ = b.Close() })
		return b
	}
	var markers []string
	for th := range threads {
		markers = append(markers, fmt.Sprintf("signals.thread.storm%d", th), fmt.Sprintf("signals.done.storm%d", th))
	}
	hook := keyHook(markers...)
	opts := func(id string) []signals.Option {
		// Defaults for TTL (15s) and recovery (1s).
		return []signals.Option{signals.WithProcessID(id), signals.WithLeaseTTL(15 * time.Second),
			signals.WithRecoveryInterval(time.Second), signals.WithLinger(2 * time.Second)}
	}
	a := newRuntime(t, noWorkGroup{newBE(nil)}, agent, opts("A")...)
	_ = newRuntime(t, newBE(hook), agent, opts("B")...)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for th := range threads {
		thread := fmt.Sprint("storm", th)
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(every)
			defer tick.Stop()
			for i := 0; ; i++ {
				if _, err := a.Send(ctx, thread, signals.Signal{ID: fmt.Sprintf("%s-%04d", thread, i), Type: "msg"}); err != nil {
					t.Error(err)
					return
				}
				select {
				case <-tick.C:
				case <-stop:
					return
				}
			}
		}()
	}
	time.Sleep(time.Second)
	before := hook.n.Load()
	time.Sleep(window)
	checks := hook.n.Load() - before
	close(stop)
	wg.Wait()
	releaseOnce.Do(func() { close(release) })
	notices := int64(threads) * int64(window/every)
	bound := notices * 2 // one check of two commands per notice, at most
	t.Logf("B sent %d commands naming the busy threads' keys in %v (%d threads, one signal per %v each: %d notices; bound %d)",
		checks, window, threads, every, notices, bound)
	if checks > bound {
		t.Errorf("B sent %d commands naming busy threads' keys in %v for %d notices, want at most %d (one check per notice at most)", checks, window, notices, bound)
	}
}
