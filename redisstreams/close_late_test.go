package redisstreams

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// TestCloseWaitsForLeftPublishes: Close's doc says it waits for in-flight
// publishes. A publish on a ctx that can end is sent by a goroutine that
// keeps the turn (publishUnit, sendQueued) and its caller returns at its
// ctx's end; Shutdown waits for such sends (Backend.late). Here: a client
// the caller owns (ContextTimeoutEnabled as NewURL's; a 1s ReadTimeout and
// no retries, so that the sends left on a stopped server give up soon),
// publishers on a ctx that is cancelled 200ms after the server is stopped
// (SIGSTOP); once they have returned, Close. After Close returns no
// goroutine of this package may still be sending a publish.
//
// Found by review (rev3, 2026-11-27): Close returned at once while a
// goroutine still sent publishes, and outlived it (3 of 3, both subtests):
// only the combiner's stragglers were waited for.
func TestCloseWaitsForLeftPublishes(t *testing.T) {
	for _, publishers := range []int{1, 16} {
		t.Run(fmt.Sprintf("publishers=%d", publishers), func(t *testing.T) { closeWaitsForPublishes(t, publishers) })
	}
}

func closeWaitsForPublishes(t *testing.T, publishers int) {
	redistest.Require(t)
	srv := redistest.Start(t, redistest.Options{})
	client := lateClient(t, srv)
	ctx := context.Background()
	b, err := New(client, Options{Prefix: psPrefix()})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			_ = b.Close()
		}
	})
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for i := range publishers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			topic := fmt.Sprintf("cw%d", i%4)
			for cctx.Err() == nil {
				if err := b.Publish(cctx, topic, pubsub.Event{Type: "x", Data: []byte("d")}); err != nil {
					return
				}
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	srv.Pause(t)
	resumed := false
	defer func() {
		if !resumed {
			srv.Resume(t)
		}
	}()
	time.Sleep(200 * time.Millisecond)
	cancel()
	wg.Wait()
	start := time.Now()
	cerr := b.Close()
	closed = true
	took := time.Since(start)
	sending := goroutinesIn("redisstreams.(*streamBus).send", "redisstreams.(*streamBus).publishUnit")
	srv.Resume(t)
	resumed = true
	t.Logf("Close returned after %v (%v); %d goroutine(s) still sending publishes", took.Round(time.Millisecond), cerr, len(sending))
	if len(sending) > 0 {
		t.Errorf("Close returned while %d goroutine(s) of this Backend were still sending publishes (doc: Close waits for in-flight publishes); first:\n%s", len(sending), sending[0])
	}
}

// TestCloseWaitsForLeftGroupSetup: the same for a group Subscribe whose ctx
// ended during its setup (setupGroup): Shutdown's doc says it waits for the
// Publish and Subscribe calls in progress; the call returned, and the setup
// it left to a goroutine of its own must not go on after Close returned (it
// may still create the group and the read guard). Found by review (rev3):
// it did (3 of 3).
func TestCloseWaitsForLeftGroupSetup(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t, redistest.Options{})
	client := lateClient(t, srv)
	ctx := context.Background()
	b, err := New(client, Options{Prefix: psPrefix()})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Publish(ctx, "gs", pubsub.Event{Type: "x", Data: []byte("d")}); err != nil {
		t.Fatal(err)
	}
	srv.Pause(t)
	resumed := false
	defer func() {
		if !resumed {
			srv.Resume(t)
		}
	}()
	// Cancelled, not a deadline: go-redis ends a blocked read at a
	// deadline (ContextTimeoutEnabled) but never at a cancel.
	sctx, cancel := context.WithCancel(ctx)
	time.AfterFunc(200*time.Millisecond, cancel)
	_, serr := b.Subscribe(sctx, "gs", func(context.Context, pubsub.Event) error { return nil }, pubsub.Group("g"))
	cancel()
	start := time.Now()
	cerr := b.Close()
	took := time.Since(start)
	setting := goroutinesIn("redisstreams.(*streamBus).setupGroup", "redisstreams.(*streamBus).createGroupAndGuard")
	srv.Resume(t)
	resumed = true
	t.Logf("Subscribe: %v; Close returned after %v (%v); %d goroutine(s) still setting up the group", serr, took.Round(time.Millisecond), cerr, len(setting))
	if len(setting) > 0 {
		t.Errorf("Close returned while a group Subscribe's setup was still in flight (doc: waits for the Subscribe calls in progress); first:\n%s", setting[0])
	}
}

// lateClient returns a client of srv as NewURL builds one (it honours ctx
// deadlines), with a 1s ReadTimeout and no retries: what a send left on a
// stopped server waits for.
func lateClient(t *testing.T, srv *redistest.Server) *redis.Client {
	t.Helper()
	o, err := redis.ParseURL(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	o.ContextTimeoutEnabled = true
	o.ReadTimeout = time.Second
	o.MaxRetries = -1
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// goroutinesIn returns the stacks of the goroutines that have a frame whose
// name contains one of funcs.
func goroutinesIn(funcs ...string) []string {
	buf := make([]byte, 1<<20)
	n := runtime.Stack(buf, true)
	var out []string
	for _, g := range strings.Split(string(buf[:n]), "\n\n") {
		for _, f := range funcs {
			if strings.Contains(g, f) {
				out = append(out, g)
				break
			}
		}
	}
	return out
}
