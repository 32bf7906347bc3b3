// Command lease shows a leasebus lease held with lease.Keep: the lease is
// renewed in the background for as long as the work runs, a second owner is
// told who holds it, lease.Wait takes it as soon as it is released, and a
// lease that is lost cancels the work's context before another owner can
// take over (fail-closed).
//
// It runs on the in-process backend with a manual lease clock, so that the
// loss can be shown without waiting; on Redis the same code runs across
// processes (redisstreams.NewURL instead of inmem).
//
// Run it with:
//
//	go run ./examples/lease
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"time"

	"github.com/leasebus/leasebus/inmem"
	"github.com/leasebus/leasebus/lease"
)

func main() {
	if err := run(context.Background(), os.Stdout); err != nil {
		log.Fatal(err)
	}
}

const (
	key = "report.pdf"
	ttl = 300 * time.Millisecond
)

func run(ctx context.Context, w io.Writer) error {
	clock := inmem.NewManualClock(time.Now())
	b, err := inmem.NewWithOptions(inmem.Options{Clock: clock})
	if err != nil {
		return err
	}
	defer b.Close()

	// worker-1 takes the lease; Keep renews it every ttl/3.
	held, err := lease.Keep(ctx, b, key, "worker-1", ttl)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "worker-1 holds %q with fencing token %d\n", key, held.Token())

	// Long work: the lease clock moves 3 TTLs while Keep renews it.
	for range 6 {
		time.Sleep(ttl / 4)
		clock.Advance(ttl / 4)
	}
	owner, err := b.GetLeaseOwner(ctx, key)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "after 1.5 TTLs of work it is still held by %s (renewed by Keep)\n", owner)

	// worker-2 is told who holds it.
	_, err = lease.Keep(ctx, b, key, "worker-2", ttl)
	var he *lease.HeldError
	if errors.As(err, &he) {
		fmt.Fprintf(w, "worker-2 cannot take it: held by %s (token %d), errors.Is(err, lease.ErrHeld) = %v\n",
			he.Owner, he.Token, errors.Is(err, lease.ErrHeld))
	} else {
		return fmt.Errorf("worker-2: want a HeldError, got %v", err)
	}

	// worker-2 waits for it; worker-1 releases it when its work is done.
	won := make(chan lease.Result, 1)
	werr := make(chan error, 1)
	go func() {
		r, err := lease.Wait(ctx, b, key, "worker-2", ttl, lease.Backoff{Min: 10 * time.Millisecond, Max: 50 * time.Millisecond})
		won <- r
		werr <- err
	}()
	time.Sleep(30 * time.Millisecond)
	if err := held.Release(ctx); err != nil {
		return err
	}
	fmt.Fprintf(w, "worker-1 released it: %v\n", held.Err())
	r, err := <-won, <-werr
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "worker-2 acquired it with lease.Wait: token %d (greater than %d)\n", r.Token, held.Token())

	// Fail-closed: worker-2 keeps it, then the lease expires on the backend
	// (here: the lease clock jumps past the TTL, as after a long pause).
	// The next renewal is refused and the work's context is cancelled.
	held2, err := lease.Keep(ctx, b, key, "worker-2", ttl)
	if err != nil {
		return err
	}
	work := held2.Context()
	clock.Advance(2 * ttl)
	select {
	case <-work.Done():
		fmt.Fprintf(w, "worker-2 lost it: work context cancelled, errors.Is(held.Err(), lease.ErrNotHeld) = %v\n",
			errors.Is(held2.Err(), lease.ErrNotHeld))
	case <-time.After(5 * time.Second):
		return errors.New("lease loss was not noticed")
	}
	return held2.Release(ctx)
}
