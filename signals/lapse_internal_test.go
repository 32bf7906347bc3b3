package signals

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasebus/leasebus/inmem"
	"github.com/leasebus/leasebus/lease"
)

// ghostHolder takes thread's lease with the provider directly (ttl),
// renews it every ttl/4 for lives, then stops (dies without releasing).
// It returns when it stopped renewing (unix nanos, 0 while alive).
func ghostHolder(t *testing.T, b *inmem.Backend, thread string, ttl, lives time.Duration) *atomic.Int64 {
	t.Helper()
	g := startGhost(t, b, thread, ttl)
	timer := time.AfterFunc(lives, g.kill)
	t.Cleanup(func() { timer.Stop() })
	return &g.died
}

// ghost holds a thread's lease as a process would that renews it and then
// dies: startGhost takes it with the provider directly and renews it every
// ttl/4 until kill, which stops the renewals (no release) and records when
// (died, unix nanos; 0 while alive).
type ghost struct {
	died atomic.Int64
	kill func()
}

func startGhost(t *testing.T, p lease.Provider, thread string, ttl time.Duration) *ghost {
	t.Helper()
	ctx := context.Background()
	key, owner := LeaseKey(thread), "ghost/run1"
	if r, err := p.AcquireLease(ctx, key, owner, ttl); err != nil || !r.Acquired {
		t.Fatalf("ghost acquire: %+v, %v", r, err)
	}
	g := &ghost{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(ttl / 4)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				g.died.Store(time.Now().UnixNano())
				return
			case <-tick.C:
				_, _ = p.RenewLease(ctx, key, owner, ttl)
			}
		}
	})
	var once sync.Once
	g.kill = func() { once.Do(func() { close(stop); wg.Wait() }) }
	t.Cleanup(g.kill)
	return g
}

// sendNoted sends signal id to thread, which another holder has, and waits
// until the notice's try of the held thread left a lapse watch entry.
func sendNoted(t *testing.T, rt *Runtime, thread, id string) {
	t.Helper()
	if acc, err := rt.Send(context.Background(), thread, Signal{ID: id, Type: "msg"}); err != nil || acc.Action != Forwarded {
		t.Fatalf("send %s: %+v, %v", id, acc, err)
	}
	for deadline := time.Now().Add(5 * time.Second); rt.lapse.len() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the notice's try of the held thread left no lapse watch entry within 5s")
		}
	}
}

// lapseRuntime returns a Runtime on b with lease TTL ttl, a 30s recovery
// interval (so a nacked notice does not come back within a test) and a 50ms
// linger, closed at the end of the test.
func lapseRuntime(t *testing.T, b *inmem.Backend, agent Agent, ttl time.Duration) *Runtime {
	t.Helper()
	rt, err := New(b, agent, WithLeaseTTL(ttl), WithRecoveryInterval(30*time.Second), WithLinger(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = rt.Close(ctx)
	})
	return rt
}

// TestLapseNotedSignalDone: the lapse watch keeps one signal per thread
// (the watcher's notice's). A holder that ran that signal and then died with
// another signal of the thread pending (the next one in its queue; its
// notice followed the watcher, so it never tried the lease itself and is
// nacked until the recovery interval) must still be taken over at the
// lapse: the try looks at the inbox, not at the noted signal. Found by
// review (helper 3, 2026-11-27): lapseTry skipped the try when the noted
// signal was done, and the pending one waited for its notice to come back
// (30s here; not run within 10s, 3 of 3).
func TestLapseNotedSignalDone(t *testing.T) {
	const thread = "lapse2"
	b := inmem.New()
	t.Cleanup(func() { b.Close() })
	ctx := context.Background()
	died := ghostHolder(t, b, thread, 600*time.Millisecond, 1500*time.Millisecond)
	ran := make(chan string, 8)
	rt := lapseRuntime(t, b, func(ctx context.Context, run *Run) error {
		for _, s := range run.Signals {
			ran <- s.ID
		}
		for {
			s, ok := run.Next(ctx)
			if !ok {
				return nil
			}
			ran <- s.ID
		}
	}, 15*time.Second)
	sendNoted(t, rt, thread, "s1")
	if acc, err := rt.Send(ctx, thread, Signal{ID: "s2", Type: "msg"}); err != nil || acc.Action != Forwarded {
		t.Fatalf("send s2: %+v, %v", acc, err)
	}
	time.Sleep(100 * time.Millisecond) // the watcher's next tries
	rt.lapse.mu.Lock()
	noted := rt.lapse.entries[thread].signal
	rt.lapse.mu.Unlock()
	other := map[string]string{"s1": "s2", "s2": "s1"}[noted]
	t.Logf("lapse entry's signal: %s; the ghost ran it (done record), %s is pending", noted, other)
	// The holder ran the noted signal (its done record says so) and died
	// running the other.
	if _, err := writeRecord(ctx, b, thread, "", []string{noted}, nil, time.Hour); err != nil {
		t.Fatal(err)
	}
	select {
	case id := <-ran:
		if id != other {
			t.Fatalf("ran %s, want %s", id, other)
		}
		t.Logf("%s ran %v after the ghost stopped renewing", id, time.Since(time.Unix(0, died.Load())).Round(time.Millisecond))
	case <-time.After(10 * time.Second):
		t.Fatalf("%s not run 10s after the sends (ghost: lease 600ms, stopped renewing after 1.5s; lapse entries %d; recovery 30s)", other, rt.lapse.len())
	}
}

// TestLapseKeptWhileWorkWaits: an entry stays while work waits for its
// thread and another process holds it, however long after its notice's
// try. Found by review (helper 3, 2026-11-27): the watch re-noted a thread
// only while a notice had found it held within the last TTL (the
// runtime's); with a recovery interval longer than the TTL (a valid
// setting: TestSendToEndingTenure uses 1min/2s) the entry was forgotten
// while the notice was still pending, and a holder that died after that
// was taken over only when the notice came back (30s here; not run within
// 10s, 3 of 3).
func TestLapseKeptWhileWorkWaits(t *testing.T) {
	const thread = "lapse3"
	b := inmem.New()
	t.Cleanup(func() { b.Close() })
	ctx := context.Background()
	died := ghostHolder(t, b, thread, 600*time.Millisecond, 3*time.Second)
	ran := make(chan time.Time, 1)
	rt := lapseRuntime(t, b, func(ctx context.Context, run *Run) error {
		select {
		case ran <- time.Now():
		default:
		}
		return nil
	}, time.Second)
	if acc, err := rt.Send(ctx, thread, Signal{ID: "s1", Type: "msg"}); err != nil || acc.Action != Forwarded {
		t.Fatalf("send s1: %+v, %v", acc, err)
	}
	select {
	case at := <-ran:
		d := died.Load()
		if d == 0 {
			t.Fatal("ran while the ghost renewed")
		}
		t.Logf("ran %v after the ghost stopped renewing", at.Sub(time.Unix(0, d)).Round(time.Millisecond))
	case <-time.After(10 * time.Second):
		t.Fatalf("not run 10s after the send (ghost: lease 600ms, stopped renewing after 3s; runtime TTL 1s; lapse entries %d; the notice is pending until the 30s recovery interval)", rt.lapse.len())
	}
}

// TestLapseQueueOneItemPerEntry: the lapse watch's heap holds exactly one
// item per entry however often entries are noted, moved later and taken
// (so its size is the number of threads noted), an entry comes due once,
// at the latest lapse noted for it, and never before it.
func TestLapseQueueOneItemPerEntry(t *testing.T) {
	rt := &Runtime{cfg: config{ttl: time.Second, recovery: time.Second},
		lapse: lapseWatch{kick: make(chan struct{}, 1), done: make(chan struct{})}}
	w := &rt.lapse
	t0 := time.Unix(1000, 0)
	latest := map[string]time.Time{}
	now := t0
	for i := range 20000 {
		th := fmt.Sprint("t", (i*7919)%500)
		lapse := now.Add(time.Duration((i*31)%2000) * time.Millisecond)
		rt.noteHeld(th, "s", now, lapse, now)
		if l, ok := latest[th]; !ok || lapse.After(l) {
			latest[th] = lapse
		}
		if i%50 == 0 {
			now = now.Add(100 * time.Millisecond)
			due, next := w.lapseTake(now)
			for _, d := range due {
				at, ok := latest[d.thread]
				if !ok {
					t.Fatalf("thread %s came due without an entry", d.thread)
				}
				if at.Add(lapseMargin).After(now) {
					t.Fatalf("thread %s came due at %v before its latest lapse %v", d.thread, now.Sub(t0), at.Sub(t0))
				}
				delete(latest, d.thread)
			}
			if !next.IsZero() && !next.After(now) {
				t.Fatalf("next due time %v is not after now %v", next.Sub(t0), now.Sub(t0))
			}
		}
		w.mu.Lock()
		q, n := len(w.q), len(w.entries)
		w.mu.Unlock()
		if q != n || n != len(latest) {
			t.Fatalf("after %d notes: %d heap items, %d entries, %d threads noted", i+1, q, n, len(latest))
		}
	}
	due, _ := w.lapseTake(now.Add(time.Hour))
	if len(due) != len(latest) || w.len() != 0 {
		t.Fatalf("at the end: %d came due, %d were noted, %d entries left", len(due), len(latest), w.len())
	}
}
