package redisstreams

import (
	"bytes"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/lease"
)

// TestReviewH70CloseLeavesRenewalRunning: Shutdown's doc says it waits,
// last, "for the sends that calls left behind when they returned at their
// ctx's end (lease calls, ...)". RenewLeases (the Keeper's renewals) returns
// at its ctx's end and leaves its pipeline running in a goroutine that
// nothing counts: after Keeper.Close and Backend.Close have both returned,
// it is still there, waiting for the black-holed server, for as long as the
// caller's client takes to give up (go-redis defaults: ReadTimeout 3s and 3
// retries).
func TestReviewH70CloseLeavesRenewalRunning(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	proxy := redistest.NewProxy(t, srv.Addr())
	c := redis.NewClient(&redis.Options{Addr: proxy.Addr()}) // go-redis's defaults
	t.Cleanup(func() { c.Close() })
	b, err := New(c, Options{Prefix: "h70c"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	k := lease.NewKeeper(b, lease.KeeperOptions{})
	t.Cleanup(func() { k.Close() })
	for i := range 10 {
		if _, err := k.Keep(t.Context(), fmt.Sprint("k", i), "a", 3*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	proxy.BlackHole()
	t.Cleanup(proxy.Restore)
	time.Sleep(1200 * time.Millisecond) // a renewal (every 1s) is in flight
	start := time.Now()
	k.Close()
	if err := b.Close(); err != nil {
		t.Logf("Backend.Close: %v", err)
	}
	closed := time.Since(start)
	if n := h70Goroutines("(*renewal).send"); n > 0 {
		left := time.Now()
		for h70Goroutines("(*renewal).send") > 0 && time.Since(left) < 30*time.Second {
			time.Sleep(50 * time.Millisecond)
		}
		t.Errorf("Keeper.Close and Backend.Close returned (in %v) with %d RenewLeases send goroutine(s) still running; the last ended %v later",
			closed.Round(time.Millisecond), n, time.Since(left).Round(time.Millisecond))
	}
}

func h70Goroutines(fn string) int {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		if bytes.Contains(g, []byte(fn)) {
			n++
		}
	}
	return n
}
