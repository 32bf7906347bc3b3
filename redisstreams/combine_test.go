package redisstreams

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// testReq is a request of the combiner tests: send sets out to in*2.
type testReq struct {
	t       turn[*testReq]
	in, out int
}

func (r *testReq) turn() *turn[*testReq] { return &r.t }

// testCombiner drives a combiner the way publish and runLease do, with a
// send that records batch sizes and can be held back.
type testCombiner struct {
	c         combiner[*testReq]
	maxActive int
	maxBatch  int
	gate      chan struct{} // when non-nil, each send waits for a value
	mu        sync.Mutex
	sizes     []int
	inFlight  atomic.Int32
	maxSeen   atomic.Int32
}

func (tc *testCombiner) send(batch []*testReq) {
	n := tc.inFlight.Add(1)
	for {
		m := tc.maxSeen.Load()
		if n <= m || tc.maxSeen.CompareAndSwap(m, n) {
			break
		}
	}
	if tc.gate != nil {
		<-tc.gate
	}
	for _, r := range batch {
		r.out = 2 * r.in
	}
	tc.mu.Lock()
	tc.sizes = append(tc.sizes, len(batch))
	tc.mu.Unlock()
	tc.inFlight.Add(-1)
}

func (tc *testCombiner) do(ctx context.Context, r *testReq) error {
	if tc.c.join(r, tc.maxActive) {
		tc.send([]*testReq{r})
		tc.c.finish(tc.maxBatch)
		return nil
	}
	batch, sent, err := tc.c.await(ctx, r, tc.maxBatch, tc.send)
	switch {
	case err != nil && !sent:
		return errNotSent{err}
	case err != nil:
		return err
	case batch != nil:
		if batch[0] != r {
			panic("a leader's batch must start with its own request")
		}
		tc.send(batch)
		tc.c.answered(batch, r)
		tc.c.finish(tc.maxBatch)
	}
	return nil
}

type errNotSent struct{ error }

func (e errNotSent) Unwrap() error { return e.error }

// TestCombinerStress runs many callers at once: every request is answered
// exactly once with its own result, no more than maxActive batches are ever
// in flight, no batch exceeds maxBatch, and requests are coalesced.
func TestCombinerStress(t *testing.T) {
	for _, maxActive := range []int{1, 2} {
		tc := &testCombiner{maxActive: maxActive, maxBatch: 7}
		var wg sync.WaitGroup
		for g := range 50 {
			wg.Go(func() {
				for i := range 200 {
					r := &testReq{in: g*1000 + i}
					if err := tc.do(context.Background(), r); err != nil {
						t.Errorf("do: %v", err)
						return
					}
					if r.out != 2*r.in {
						t.Errorf("request %d: out %d", r.in, r.out)
						return
					}
				}
			})
		}
		wg.Wait()
		tc.c.wait()
		total, biggest := 0, 0
		for _, n := range tc.sizes {
			total += n
			biggest = max(biggest, n)
		}
		if total != 50*200 {
			t.Errorf("maxActive %d: %d requests sent, want %d", maxActive, total, 50*200)
		}
		if biggest > tc.maxBatch {
			t.Errorf("maxActive %d: a batch of %d, over maxBatch %d", maxActive, biggest, tc.maxBatch)
		}
		if int(tc.maxSeen.Load()) > maxActive {
			t.Errorf("maxActive %d: %d batches in flight at once", maxActive, tc.maxSeen.Load())
		}
		if tc.c.active != 0 || len(tc.c.queue) != 0 {
			t.Errorf("maxActive %d: left active %d, queue %d", maxActive, tc.c.active, len(tc.c.queue))
		}
		t.Logf("maxActive %d: %d requests in %d batches (largest %d)", maxActive, total, len(tc.sizes), biggest)
	}
}

// TestCombinerGiveUp checks callers whose ctx ends while they wait: one
// still queued is withdrawn and never sent; one handed a batch to lead gives
// up, and a goroutine sends the batch for the others.
func TestCombinerGiveUp(t *testing.T) {
	tc := &testCombiner{maxActive: 1, maxBatch: 10, gate: make(chan struct{})}
	leaderDone := make(chan error)
	go func() { leaderDone <- tc.do(context.Background(), &testReq{in: 1}) }()
	waitFor(t, func() bool { return tc.inFlight.Load() == 1 })

	// Queued behind the leader: a caller that gives up is withdrawn.
	ctx, cancel := context.WithCancel(context.Background())
	gaveUp := make(chan error)
	go func() { gaveUp <- tc.do(ctx, &testReq{in: 2}) }()
	waitFor(t, func() bool { tc.c.mu.Lock(); defer tc.c.mu.Unlock(); return len(tc.c.queue) == 1 })
	cancel()
	if err := <-gaveUp; !errors.As(err, new(errNotSent)) || !errors.Is(err, context.Canceled) {
		t.Fatalf("withdrawn caller: %v, want not sent, context.Canceled", err)
	}

	tc.gate <- struct{}{} // the leader's own send
	if err := <-leaderDone; err != nil {
		t.Fatalf("leader: %v", err)
	}
	tc.c.wait()
	if tc.c.active != 0 || len(tc.c.queue) != 0 || len(tc.sizes) != 1 {
		t.Fatalf("left active %d, queue %d, batches %v; want the withdrawn request never sent", tc.c.active, len(tc.c.queue), tc.sizes)
	}

	// A caller handed a batch to lead as its ctx ends: either it leads
	// (await returns the batch) or await has a goroutine send it; either
	// way the other caller of the batch is answered. Both outcomes occur
	// (select picks at random between the wake-up and ctx).
	done := context.Background()
	cancelled, cancel2 := context.WithCancel(context.Background())
	cancel2()
	outcomes := map[bool]int{}
	for range 40 {
		tc := &testCombiner{maxActive: 1, maxBatch: 10}
		lead, first, second := &testReq{in: 1}, &testReq{in: 3}, &testReq{in: 4}
		if !tc.c.join(lead, 1) || tc.c.join(first, 1) || tc.c.join(second, 1) {
			t.Fatal("join: want one leader and two queued")
		}
		tc.send([]*testReq{lead})
		tc.c.finish(tc.maxBatch) // hands {first, second} to first
		batch, sent, err := tc.c.await(cancelled, first, tc.maxBatch, tc.send)
		switch {
		case err == nil && len(batch) == 2 && batch[0] == first:
			tc.send(batch)
			tc.c.answered(batch, first)
			tc.c.finish(tc.maxBatch)
			outcomes[true]++
		case errors.Is(err, context.Canceled) && sent && batch == nil:
			tc.c.wait()
			outcomes[false]++
		default:
			t.Fatalf("await = %v, %v, %v; want the batch, or sent and context.Canceled", batch, sent, err)
		}
		if _, _, err := tc.c.await(done, second, tc.maxBatch, tc.send); err != nil || second.out != 8 {
			t.Fatalf("second caller: %v, out %d; want its batch sent", err, second.out)
		}
		if tc.c.active != 0 || len(tc.c.queue) != 0 {
			t.Fatalf("left active %d, queue %d", tc.c.active, len(tc.c.queue))
		}
	}
	if outcomes[true] == 0 || outcomes[false] == 0 {
		t.Fatalf("outcomes %v: want both a caller that leads and one that gives up", outcomes)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 5s")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestCombinerWaitWhileGivingUp runs wait (as Shutdown does once its ctx
// ended) while callers keep giving up and leaving batches to goroutines: it
// must neither race (go test -race) nor return while a straggler it counted
// still runs.
func TestCombinerWaitWhileGivingUp(t *testing.T) {
	tc := &testCombiner{maxActive: 1, maxBatch: 4}
	stop := make(chan struct{})
	var callers, waiters sync.WaitGroup
	for g := range 8 {
		callers.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithCancel(context.Background())
				if i%2 == 0 {
					cancel() // gives up at once: withdrawn, or its batch left to a goroutine
				}
				r := &testReq{in: g*100000 + i}
				err := tc.do(ctx, r)
				cancel()
				if err == nil && r.out != 2*r.in {
					t.Errorf("request %d: out %d", r.in, r.out)
				}
			}
		})
	}
	waiters.Go(func() {
		for range 2000 {
			tc.c.wait()
			tc.c.mu.Lock()
			n := tc.c.stragglers
			tc.c.mu.Unlock()
			if n < 0 {
				t.Errorf("stragglers %d", n)
			}
		}
	})
	waiters.Wait()
	close(stop)
	callers.Wait()
	tc.c.wait()
	if tc.c.stragglers != 0 || tc.c.active != 0 || len(tc.c.queue) != 0 {
		t.Fatalf("left stragglers %d, active %d, queue %d", tc.c.stragglers, tc.c.active, len(tc.c.queue))
	}
}
