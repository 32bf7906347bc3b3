// Package lifecycle is the closing state of a leasebus backend, written once:
// which calls may still start, the one shutdown that drains the backend, and
// the Close and Shutdown(ctx) that wait for it (net/http Server style).
package lifecycle

import (
	"context"
	"sync"
)

// Closer tracks the calls in progress on a backend and runs its shutdown
// once. The zero value is open. A Closer is safe for concurrent use.
type Closer struct {
	mu      sync.Mutex
	closing bool
	calls   sync.WaitGroup
	abort   chan struct{} // closed when a Shutdown's ctx ended before the drain
	aborted sync.Once
	done    chan struct{} // closed when the drain has returned
	err     error         // the drain's result, read after done
}

// Closed reports whether the shutdown has begun.
func (c *Closer) Closed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closing
}

// Enter registers a call that the shutdown waits for before it drains. It
// returns false, registering nothing, once the shutdown has begun. Every
// true must be paired with a Leave.
func (c *Closer) Enter() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return false
	}
	c.calls.Add(1)
	return true
}

// Leave ends a call registered by Enter.
func (c *Closer) Leave() { c.calls.Done() }

// Shutdown begins the shutdown on its first call: from then on Closed is
// true and Enter fails. Once the calls registered by Enter have left, drain
// runs, once, in a goroutine of its own. Every Shutdown call waits for drain
// to return and then returns its error (the first call) or nil (later ones).
//
// When ctx ends before drain has returned, Shutdown closes the channel drain
// was given (abort), so that drain stops waiting for what may never end
// (a handler that ignores its ctx) and finishes what it can do without it,
// and returns ctx.Err() at once; drain goes on in the background, and a
// later Shutdown (or Close) waits for it again.
func (c *Closer) Shutdown(ctx context.Context, drain func(abort <-chan struct{}) error) error {
	c.mu.Lock()
	first := !c.closing
	if first {
		c.closing = true
		c.abort = make(chan struct{})
		c.done = make(chan struct{})
	}
	abort, done := c.abort, c.done
	c.mu.Unlock()
	if first {
		go func() {
			defer close(done)
			c.calls.Wait()
			c.err = drain(abort)
		}()
	}
	select {
	case <-done:
		if first {
			return c.err
		}
		return nil
	case <-ctx.Done():
		c.aborted.Do(func() { close(abort) })
		return ctx.Err()
	}
}

// Aborted reports whether a Shutdown gave up waiting for the drain (its ctx
// ended first). It is true before that Shutdown returns, so what the backend
// does after checking it is ordered with the caller's next step.
func (c *Closer) Aborted() bool {
	c.mu.Lock()
	abort := c.abort
	c.mu.Unlock()
	if abort == nil {
		return false
	}
	select {
	case <-abort:
		return true
	default:
		return false
	}
}

// Wait blocks until a drain started by Shutdown has returned; it returns at
// once when the shutdown has not begun.
func (c *Closer) Wait() {
	c.mu.Lock()
	done := c.done
	c.mu.Unlock()
	if done != nil {
		<-done
	}
}
