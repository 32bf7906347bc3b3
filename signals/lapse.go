package signals

import (
	"container/heap"
	"context"
	"sync"
	"time"
)

// holderInfo is another process's hold on a thread's lease, as an acquire
// saw it: its owner string and when its lease lapses unless it is renewed
// (zero when the backend did not say).
type holderInfo struct {
	owner string
	lapse time.Time
}

// lapseWatch takes a thread over the moment its holder's lease can lapse,
// when a wake notice of the thread is waiting on that holder.
//
// Without it a dead owner's thread was taken by the next try of one of its
// notices after the lease expired. Notices that cannot be settled are
// nacked and come back after the recovery interval, and under a steady
// stream of sends to threads busy with long runs they come back behind
// thousands of others (each busy thread's queued signals are notices
// cycling through the handler slots): that next try came seconds after the
// expiry (at the default TTL, 16.0-20.3s after the owner was killed,
// against the 18s the docs promised: TestProcTakeoverUnderSendStream with
// LEASEBUS_STREAM_DEFAULTS=1).
//
// So when a notice handler's try of the lease finds it held (Runtime.wake
// reports when the holder's lease lapses), the thread is noted here with
// that time and the notice's signal; when the time comes and no later try
// saw the lease renewed meanwhile (a try that sees a later lapse moves the
// entry later), one try is made: nothing if the signal is done by then,
// else the lease (a Recovered tenure when it is free). A try that finds the
// lease renewed notes the new lapse again only while a notice found the
// thread held within the last TTL, so a live holder costs nothing as long
// as its notices' own tries see its renewals, and a thread nobody waits on
// is forgotten.
//
// State: one entry per thread, from a notice's failed try until its lapse
// time came (then it is gone, or noted again by that try as above): an
// entry lives at most about two TTLs after the last notice of its thread
// found the lease held (TestLapseWatchBounded).
type lapseWatch struct {
	mu      sync.Mutex
	entries map[string]*lapseEntry
	q       lapseQueue
	kick    chan struct{} // wakes lapseLoop: an entry came due earlier
	done    chan struct{} // closed when lapseLoop returned
}

type lapseEntry struct {
	at     time.Time // when the holder's lease lapses, as last seen
	noted  time.Time // when a notice's try last found the thread held
	signal string    // that notice's signal
}

// lapseDue is an entry whose time came, taken out of the watch.
type lapseDue struct {
	thread, signal string
	noted          time.Time
}

// lapseMargin is added to a lapse time: the try comes just after the lease
// expired on the server, not just before.
const lapseMargin = 5 * time.Millisecond

// lapseTries bounds the tries of due entries in flight at once.
const lapseTries = 16

// noteHeld records that a try of thread's lease, made for a notice of
// signal that is not settled (at noted), found it held until lapse.
func (rt *Runtime) noteHeld(thread, signal string, lapse, noted time.Time) {
	if lapse.IsZero() || rt.lapse.done == nil {
		return
	}
	at := lapse.Add(lapseMargin)
	w := &rt.lapse
	w.mu.Lock()
	e := w.entries[thread]
	first := false
	switch {
	case e == nil:
		if w.entries == nil {
			w.entries = make(map[string]*lapseEntry)
		}
		e = &lapseEntry{at: at}
		w.entries[thread] = e
		heap.Push(&w.q, lapseItem{at: at, thread: thread})
		first = w.q[0].thread == thread
	case at.After(e.at):
		// Renewed since: its item comes up at the old time and is put
		// back at this one (lapseTake).
		e.at = at
	}
	if noted.After(e.noted) {
		e.noted, e.signal = noted, signal
	}
	w.mu.Unlock()
	if first {
		select {
		case w.kick <- struct{}{}:
		default:
		}
	}
}

// lapseTake takes out the entries due at now and returns them, and when the
// next one is due (zero: none left).
func (w *lapseWatch) lapseTake(now time.Time) (due []lapseDue, next time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for len(w.q) > 0 && !w.q[0].at.After(now) {
		it := heap.Pop(&w.q).(lapseItem)
		e := w.entries[it.thread]
		if e == nil {
			continue
		}
		if e.at.After(it.at) {
			heap.Push(&w.q, lapseItem{at: e.at, thread: it.thread})
			continue
		}
		delete(w.entries, it.thread)
		due = append(due, lapseDue{thread: it.thread, signal: e.signal, noted: e.noted})
	}
	if len(w.q) > 0 {
		next = w.q[0].at
	}
	return due, next
}

// len returns the number of entries.
func (w *lapseWatch) len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.entries)
}

// lapseLoop tries each entry as it comes due, until Close begins; it
// returns once the tries it started returned.
func (rt *Runtime) lapseLoop() {
	w := &rt.lapse
	defer close(w.done)
	var tries sync.WaitGroup
	defer tries.Wait()
	sem := make(chan struct{}, lapseTries)
	rt.dueLoop(w.kick, func(now time.Time) time.Time {
		due, next := w.lapseTake(now)
		for _, d := range due {
			select {
			case sem <- struct{}{}:
			case <-rt.closing:
				return time.Time{}
			}
			tries.Add(1)
			go func() {
				defer func() { <-sem; tries.Done() }()
				rt.lapseTry(d)
			}()
		}
		return next
	})
}

// lapseTry makes the one try of a due entry (see lapseWatch).
func (rt *Runtime) lapseTry(d lapseDue) {
	if rt.closingNow() {
		return // Close hands the notices back; a live runtime takes them
	}
	ctx, cancel := context.WithTimeout(rt.hardCtx, rt.cfg.ttl)
	defer cancel()
	if done, err := rt.isDone(ctx, d.thread, d.signal); err != nil || done {
		// Done: nothing waits on the holder. An error: the notices come
		// back and try again, as they would without this watch.
		return
	}
	s, _, h, err := rt.wake(ctx, d.thread, true)
	switch {
	case err != nil:
	case s != nil:
		s.kick()
	case time.Since(d.noted) < rt.cfg.ttl:
		rt.noteHeld(d.thread, d.signal, h.lapse, d.noted)
	}
}

type lapseItem struct {
	at     time.Time
	thread string
}

// lapseQueue is a min-heap of lapseItems by time (container/heap).
type lapseQueue []lapseItem

func (q lapseQueue) Len() int           { return len(q) }
func (q lapseQueue) Less(i, j int) bool { return q[i].at.Before(q[j].at) }
func (q lapseQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *lapseQueue) Push(x any)        { *q = append(*q, x.(lapseItem)) }
func (q *lapseQueue) Pop() any {
	old := *q
	it := old[len(old)-1]
	*q = old[:len(old)-1]
	return it
}
