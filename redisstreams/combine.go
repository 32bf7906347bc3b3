package redisstreams

import (
	"context"
	"runtime"
	"sync"
)

// combiner coalesces concurrent requests into batches without a goroutine
// of its own ("leader" batching). A caller that finds fewer than maxActive
// batches in flight becomes a leader: it sends its own request at once, from
// its own goroutine, so a lone caller pays no goroutine switch. A caller that
// finds maxActive batches in flight queues its request and waits. A leader
// that has sent its batch and answered it hands everything queued meanwhile
// (up to maxBatch) to the first queued caller, which wakes up as the next
// leader and sends it as one batch, its own request first; with nothing
// queued it frees its slot. Under load each batch thus carries every request
// that arrived while the previous ones were in flight: the deeper the queue,
// the larger the batch, and no goroutine is started or switched to beyond
// the callers themselves. (A user may instead send from a goroutine of its
// own that keeps the turn while requests queue, taking each batch with
// next: runLease does, for callers whose ctx can end.)
//
// The zero value is ready to use.
type combiner[T member[T]] struct {
	mu     sync.Mutex
	active int // batches in flight
	queue  []T
	// stragglers counts the leaders started for callers that gave up;
	// idle (lazily made, on mu) is broadcast when it drops to zero. Both
	// are guarded by mu, so wait may run while requests are still joined
	// (a Shutdown whose ctx ended before every caller left), unlike a
	// sync.WaitGroup, whose Add must not race its Wait.
	stragglers int
	idle       *sync.Cond
}

// member is a request that can wait in a combiner: a pointer type whose
// turn holds its wake-up.
type member[T any] interface {
	comparable
	turn() *turn[T]
}

// turn is the combiner's part of a request.
type turn[T any] struct {
	// wake is closed once: when the request has been answered, or when its
	// caller is to lead batch. A caller that leads at once (join) does not
	// wait on it; runLease uses it to tell when its own send is over.
	wake  chan struct{}
	batch []T // set (under the combiner's lock) for a caller that is to lead
}

// join reports whether the caller leads: it must then send item alone and
// call finish. Otherwise item is queued and the caller must call await.
func (c *combiner[T]) join(item T, maxActive int) (lead bool) {
	item.turn().wake = make(chan struct{})
	c.mu.Lock()
	if c.active < maxActive {
		c.active++
		c.mu.Unlock()
		return true
	}
	c.queue = append(c.queue, item)
	c.mu.Unlock()
	return false
}

// await waits until item is answered (it returns nil, nil) or its caller is
// to lead a batch (it returns the batch, item first: the caller must send it,
// call answered, then finish). When ctx ends first it returns ctx.Err() and
// sent: false if item was still queued (it never will be sent), true if it
// was taken into a batch (it may have been sent). A batch handed to a caller
// that gives up is sent by a new goroutine with send.
func (c *combiner[T]) await(ctx context.Context, item T, maxBatch int, send func([]T)) (batch []T, sent bool, err error) {
	t := item.turn()
	select {
	case <-t.wake:
		return t.batch, true, nil
	case <-ctx.Done():
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, x := range c.queue {
		if x == item {
			c.queue = append(c.queue[:i], c.queue[i+1:]...)
			return nil, false, ctx.Err()
		}
	}
	if t.batch != nil {
		// Handed a batch: someone must send it.
		c.stragglers++
		go func(batch []T) {
			defer c.straggled()
			send(batch)
			c.answered(batch, batch[0]) // batch[0]'s wake closed when it was handed the batch
			c.finish(maxBatch)
		}(t.batch)
	}
	return nil, true, ctx.Err()
}

// answered wakes the callers of batch, except self (the leader; the zero T
// for a batch taken by next, whose callers are all waiting), whose requests
// now hold their results.
func (c *combiner[T]) answered(batch []T, self T) {
	for _, x := range batch {
		if x != self {
			close(x.turn().wake)
		}
	}
	if len(batch) > 1 {
		runtime.Gosched()
	}
}

// finish ends a leader's turn: it hands the first maxBatch queued requests
// to the first one's caller, or frees the slot when none are queued.
func (c *combiner[T]) finish(maxBatch int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.queue) == 0 {
		c.active--
		return
	}
	var batch []T
	if len(c.queue) <= maxBatch {
		batch, c.queue = c.queue, nil
	} else {
		batch = make([]T, maxBatch)
		copy(batch, c.queue)
		c.queue = append(c.queue[:0], c.queue[maxBatch:]...)
	}
	t := batch[0].turn()
	t.batch = batch
	close(t.wake)
}

// next ends a turn as finish does, for a leader that sends from a goroutine
// of its own and goes on sending: it takes the first maxBatch queued
// requests (their callers are not woken: they wait to be answered, and
// their await, should their ctx end, finds them taken and sent) and returns
// them, or frees the slot and returns nil when none are queued.
func (c *combiner[T]) next(maxBatch int) []T {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.queue) == 0 {
		c.active--
		return nil
	}
	var batch []T
	if len(c.queue) <= maxBatch {
		batch, c.queue = c.queue, nil
	} else {
		batch = make([]T, maxBatch)
		copy(batch, c.queue)
		c.queue = append(c.queue[:0], c.queue[maxBatch:]...)
	}
	return batch
}

// failQueued answers the requests queued now that match with fail (which
// sets their error), leaves the others queued, and returns how many it
// failed. Only the holder of a turn calls it, after its batch failed in a
// way the matching requests would too: they were never sent, so failing
// them is exact, and it spares each a wait for the same timeouts one batch
// after another.
func (c *combiner[T]) failQueued(match func(T) bool, fail func(T)) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	kept := c.queue[:0]
	n := 0
	for _, x := range c.queue {
		if !match(x) {
			kept = append(kept, x)
			continue
		}
		fail(x)
		close(x.turn().wake) // (its batch is nil: answered, not to lead)
		n++
	}
	clear(c.queue[len(kept):])
	c.queue = kept
	return n
}

// straggled ends a leader started for a caller that gave up.
func (c *combiner[T]) straggled() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stragglers--
	if c.stragglers == 0 && c.idle != nil {
		c.idle.Broadcast()
	}
}

// wait returns when no leader started for a caller that gave up is running.
// It is safe while requests are still being joined or awaited; a leader
// started after it returned is not waited for.
func (c *combiner[T]) wait() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.stragglers > 0 {
		if c.idle == nil {
			c.idle = sync.NewCond(&c.mu)
		}
		c.idle.Wait()
	}
}

// lateGroup counts goroutines that may go on after the call that started
// them returned (a send whose caller's ctx ended: awaitSend); wait returns
// when none runs. Unlike a sync.WaitGroup's, its add may race its wait (a
// Shutdown that gave up while calls still run). The zero value is ready.
type lateGroup struct {
	mu   sync.Mutex
	n    int
	idle *sync.Cond // lazily made, on mu; broadcast when n drops to zero
}

func (l *lateGroup) add() {
	l.mu.Lock()
	l.n++
	l.mu.Unlock()
}

func (l *lateGroup) done() {
	l.mu.Lock()
	l.n--
	if l.n == 0 && l.idle != nil {
		l.idle.Broadcast()
	}
	l.mu.Unlock()
}

// wait returns when no goroutine counted by add runs; one added after it
// returned is not waited for.
func (l *lateGroup) wait() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for l.n > 0 {
		if l.idle == nil {
			l.idle = sync.NewCond(&l.mu)
		}
		l.idle.Wait()
	}
}

// lanes is a set of combiners, one per lane. On a Cluster client a lane is
// a master (laneOf): batches never span masters, so a master that stops
// answering holds up only the calls for its own keys, and calls for the
// others go on in their own batches (TestClusterStalledMasterSparesOtherNodes).
// On any other client there is one lane, the zero one.
//
// A lane lives as long as the Backend: there is one per master address the
// client routed a call to, at most maxLanes; the calls for masters beyond
// those (a cluster whose masters were replaced many times over) share the
// zero lane, as on a client that is not sharded. The zero value is ready.
type lanes[T member[T]] struct {
	one combiner[T] // the zero lane
	mu  sync.RWMutex
	by  map[string]*combiner[T]
}

// maxLanes bounds the lanes of a lanes beside its zero lane.
const maxLanes = 64

// lane returns the combiner of the lane named name ("" is the zero lane).
func (l *lanes[T]) lane(name string) *combiner[T] {
	if name == "" {
		return &l.one
	}
	l.mu.RLock()
	c := l.by[name]
	l.mu.RUnlock()
	if c != nil {
		return c
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if c = l.by[name]; c != nil {
		return c
	}
	if len(l.by) >= maxLanes {
		return &l.one
	}
	if l.by == nil {
		l.by = make(map[string]*combiner[T])
	}
	c = &combiner[T]{}
	l.by[name] = c
	return c
}

// count returns the number of lanes made beside the zero lane.
func (l *lanes[T]) count() int {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return len(l.by)
}

// wait returns when no leader started for a caller that gave up is running
// in any lane (combiner.wait).
func (l *lanes[T]) wait() {
	l.one.wait()
	l.mu.RLock()
	all := make([]*combiner[T], 0, len(l.by))
	for _, c := range l.by {
		all = append(all, c)
	}
	l.mu.RUnlock()
	for _, c := range all {
		c.wait()
	}
}
