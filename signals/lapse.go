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
// when work waits for the thread and a wake notice of it found it held.
//
// Without it a dead owner's thread was taken by the next try of one of its
// notices after the lease expired. Notices that cannot be settled are
// nacked and come back after the recovery interval, and under a steady
// stream of sends to threads busy with long runs they come back behind
// thousands of others (each busy thread's queued signals are notices
// cycling through the handler slots): that next try came seconds after the
// expiry (at the default TTL, 15.5-18.7s after the owner was killed, against
// the TTL + recovery + 1s the backlog tests hold: TestProcTakeoverUnderSendStream).
//
// So when a notice handler's try of the lease finds it held (Runtime.wake
// reports when the holder's lease lapses), the thread is noted here with
// that time; a later try that sees a later lapse (the lease was renewed or
// handed on) moves the entry later. When the time comes, one try is made:
// first whether work waits for the thread (its inbox group's backlog: an
// entry not yet read or read and not acked; when the backlog cannot be
// told, work is taken to wait; on a pubsub without pubsub.BacklogReader,
// whether the noted notice's signal is still not done and not settled by
// this process's tenures), then, if so, the lease (a Recovered tenure when
// it is free). A try that finds the lease held again notes the new lapse
// (when the backlog did not tell, only while a notice found the thread held
// within max(TTL, two recovery intervals)).
//
// State: one entry per thread, from a notice's failed try until the first
// try at its lapse time that finds nothing waiting, the lease free, or an
// error: an entry lives while another process holds the thread with work
// waiting for it (a live holder's entry comes due about once per renewal
// that no notice of this process saw), and goes within one of the holder's
// lease periods after the work is done (TestTakeoverAtLeaseLapse); when the
// backlog cannot be told, at the latest max(TTL, two recovery intervals)
// after the last notice that found the thread held, and a holder that
// releases the thread meanwhile leaves it to one Recovered tenure, which
// finds nothing and ends (TestLapseEntryWhenBacklogUntold); the heap holds
// one item per entry (TestLapseQueueOneItemPerEntry). A notice found done
// by a process without a tenure of the thread adds an entry too (noteDone),
// due a TTL later, which makes one try and goes: one per thread with such
// notices in the last TTL.
type lapseWatch struct {
	mu      sync.Mutex
	entries map[string]*lapseEntry
	q       lapseQueue
	kick    chan struct{} // wakes lapseLoop: an entry came due earlier
	done    chan struct{} // closed when lapseLoop returned
}

type lapseEntry struct {
	at       time.Time // when the holder's lease lapses, as last seen
	noted    time.Time // when a notice's try last found the thread held
	signal   string    // that notice's signal
	received time.Time // when this process first received that notice
	// doneOnly: made by noteDone, and no notice found the thread held
	// since: its one try ends the entry (a holder found then is alive).
	doneOnly bool
}

// lapseDue is an entry whose time came, taken out of the watch.
type lapseDue struct {
	thread, signal  string
	noted, received time.Time
	doneOnly        bool
}

// lapseMargin is added to a lapse time: the try comes just after the lease
// expired on the server, not just before.
const lapseMargin = 5 * time.Millisecond

// lapseTries bounds the tries of due entries in flight at once.
const lapseTries = 16

// noteHeld records that a try of thread's lease, made at noted for a notice
// of signal first received at received and not settled, found it held
// until lapse.
func (rt *Runtime) noteHeld(thread, signal string, received, lapse, noted time.Time) {
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
	e.doneOnly = false
	if noted.After(e.noted) {
		e.noted, e.signal, e.received = noted, signal, received
	}
	w.mu.Unlock()
	if first {
		select {
		case w.kick <- struct{}{}:
		default:
		}
	}
}

// noteDone records that a notice of signal, first received at received,
// was found done in the thread's done record while this process has no
// tenure of the thread, when the watch has no entry for the thread: an
// entry due a lease TTL from now, when the lease of the run that recorded
// the signal has lapsed if its process died (it wrote the record while it
// held the lease). Its try finds nothing waiting, and goes, unless that
// process died (or was cut off for good) after writing the record and
// before its backend wrote the inbox entry's ack: then the entry is still
// pending on the dead consumer, the inbox is not drained and gets no
// expiry (pubsub.ExpireWhenDrained), and once this notice is acked nothing
// else names the thread; the try takes the free thread, whose tenure
// claims the entry, finds it done, acks it and deletes the drained inbox
// (review h65: TestReviewH65CutAfterRecordLeavesInbox, where the inbox
// stayed for ever). A holder found then is alive (its lease was renewed
// since the record), or a new tenure that claims what was left pending: the
// entry goes, and is not moved to that holder's lapse. Only on a
// pubsub.BacklogReader, whose backlog tells (without it the try would find
// the noted signal done and do nothing).
func (rt *Runtime) noteDone(thread, signal string, received time.Time) {
	if rt.br == nil || rt.lapse.done == nil {
		return
	}
	rt.mu.Lock()
	local := rt.sessions[thread] != nil
	rt.mu.Unlock()
	if local {
		return // this process's tenure reads the inbox, and tidies it
	}
	now := time.Now()
	at := now.Add(rt.cfg.ttl + lapseMargin)
	w := &rt.lapse
	w.mu.Lock()
	if e := w.entries[thread]; e != nil {
		// Already watched. An entry that follows a holder's lapse (a
		// notice found the thread held) reads the backlog as this one
		// would, at the latest when the holder's lease lapses. An
		// earlier noteDone's is moved to this one's time, as noteHeld
		// moves one to a later lapse (lapseTake puts its item back):
		// due earlier, it could find the lease of the run that recorded
		// this signal still held, by a process that died since.
		if e.doneOnly && at.After(e.at) {
			e.at = at
			e.noted, e.signal, e.received = now, signal, received
		}
		w.mu.Unlock()
		return
	}
	if w.entries == nil {
		w.entries = make(map[string]*lapseEntry)
	}
	w.entries[thread] = &lapseEntry{at: at, noted: now, signal: signal, received: received, doneOnly: true}
	heap.Push(&w.q, lapseItem{at: at, thread: thread})
	first := w.q[0].thread == thread
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
		due = append(due, lapseDue{thread: it.thread, signal: e.signal, noted: e.noted, received: e.received, doneOnly: e.doneOnly})
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
	waits, told, err := rt.lapseWaits(ctx, d)
	if err != nil || !waits {
		// Nothing waits: the entry goes. An error: the notices come back
		// and try again, as they would without this watch.
		return
	}
	s, _, h, err := rt.wake(ctx, d.thread, true)
	switch {
	case err != nil:
	case s != nil:
		s.kick()
	case d.doneOnly:
		// noteDone's try: the lease of the run that recorded the signal
		// has lapsed by now unless it was renewed, so a holder is alive
		// (or a new tenure, which claims what was left pending): it
		// tidies the inbox. Not followed, so that a busy thread's
		// settled notices cost one try each per TTL, not one per renewal.
	case told || time.Since(d.noted) < max(rt.cfg.ttl, 2*rt.cfg.recovery):
		rt.noteHeld(d.thread, d.signal, d.received, h.lapse, d.noted)
	}
}

// lapseWaits reports whether work waits for the thread of a due entry, and
// whether the inbox's backlog told (see lapseWatch).
func (rt *Runtime) lapseWaits(ctx context.Context, d lapseDue) (waits, told bool, err error) {
	if rt.br != nil {
		bl, err := rt.br.GroupBacklog(ctx, InboxTopic(d.thread), InboxGroup)
		switch {
		case err != nil:
			return false, false, err
		case bl.Lag > 0 || bl.Pending > 0:
			return true, true, nil
		case bl.Lag == 0:
			return false, true, nil
		}
		// Lag -1 ("cannot tell") and nothing pending: work may wait after
		// the noted signal, done or not (redisstreams reports -1 beyond
		// 10,000 unread entries: TestLapseNotedSignalDoneLagUnknown), so
		// the lease is tried as when work waits, but as not told: a holder
		// found alive is noted again only within max(TTL, two recovery
		// intervals) of a notice, and a free lease starts one Recovered
		// tenure, which ends by itself when it finds nothing to read.
		return true, false, nil
	}
	if rt.settledByTenures(d.thread, d.received) {
		return false, false, nil
	}
	done, err := rt.isDone(ctx, d.thread, d.signal)
	return !done, false, err
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
