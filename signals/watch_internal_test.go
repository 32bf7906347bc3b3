package signals

import (
	"fmt"
	"testing"
	"time"
)

// TestWatchMapBounded: the watch map (watch.go) keeps a thread's entry
// after its watcher left only while its last check is recent; entries whose
// last check is older than the recovery interval go at the next sweep, and
// a thread never checked leaves nothing when its watcher leaves.
func TestWatchMapBounded(t *testing.T) {
	rt := &Runtime{cfg: config{recovery: time.Second}}
	now := time.Now()
	const n = 10 * watchSweepMin
	for i := range n {
		th := fmt.Sprint("t", i)
		if !watchOK(rt, th, false, now, 0) {
			t.Fatalf("thread %s: not made watcher of an unwatched thread", th)
		}
		if i%2 == 0 {
			rt.watchedRecord(th, "", now) // checked: kept for a while
		}
		rt.unwatchThread(th)
		now = now.Add(time.Millisecond)
	}
	// Threads checked within the last recovery interval, at most twice
	// what a sweep left, plus those of the last batch.
	if got := len(rt.watching); got > 2*1000+watchSweepMin {
		t.Fatalf("watch map holds %d entries after %d threads checked one per ms (recovery 1s), want about 1000", got, n)
	}
	// A second handler of a watched thread follows; on a retry, so does one
	// that comes within half a recovery interval of the last check.
	if !watchOK(rt, "x", false, now, 0) || watchOK(rt, "x", false, now, 0) {
		t.Fatal("a second handler of a watched thread was made watcher")
	}
	rt.watchedRecord("x", "", now)
	rt.unwatchThread("x")
	if watchOK(rt, "x", true, now.Add(100*time.Millisecond), 0) {
		t.Fatal("a retry 100ms after the last check (recovery 1s) was made watcher")
	}
	if !watchOK(rt, "x", false, now.Add(100*time.Millisecond), 0) {
		t.Fatal("a first delivery with no active watcher was not made watcher")
	}
	rt.unwatchThread("x")
	if !watchOK(rt, "x", true, now.Add(600*time.Millisecond), 0) {
		t.Fatal("a retry 600ms after the last check (recovery 1s) was not made watcher")
	}
	rt.unwatchThread("x")
	// Everything old goes at the next sweep, which comes once the map
	// reached the size the last sweep set.
	later := now.Add(time.Hour)
	at := rt.watchSweepAt
	for i := 0; rt.watchSweepAt == at; i++ {
		th := fmt.Sprint("u", i)
		watchOK(rt, th, false, later, 0)
		rt.watchedRecord(th, "", later)
		rt.unwatchThread(th)
	}
	for th, w := range rt.watching {
		if later.Sub(w.checked) > time.Second {
			t.Fatalf("thread %s: entry checked %v before the sweep kept", th, later.Sub(w.checked))
		}
	}
}

// TestWatchExtendedByFirstDeliveries: a follower's first delivery makes the
// watcher poll on until the follower's own hold would have ended, at most
// twice a first delivery's hold from the watcher's start; a redelivered
// follower does not extend it.
func TestWatchExtendedByFirstDeliveries(t *testing.T) {
	rt := &Runtime{cfg: config{recovery: time.Second, ttl: 10 * time.Second}}
	hold := noticeHold(rt.cfg, 1) // 250ms
	t0 := time.Now()
	if !watchOK(rt, "x", false, t0, hold) {
		t.Fatal("not made watcher")
	}
	if d := rt.watchExtended("x", t0.Add(hold)); d != 0 {
		t.Fatalf("extended by %v without followers", d)
	}
	_ = rt.followNotice("x", "b", t0.Add(100*time.Millisecond), false)
	if d := rt.watchExtended("x", t0.Add(hold)); d != 0 {
		t.Fatalf("a redelivered follower extended the hold by %v", d)
	}
	_ = rt.followNotice("x", "c", t0.Add(100*time.Millisecond), true)
	if d := rt.watchExtended("x", t0.Add(hold)); d != 100*time.Millisecond {
		t.Fatalf("a follower arriving 100ms in extended the hold by %v at its end, want 100ms", d)
	}
	_ = rt.followNotice("x", "d", t0.Add(400*time.Millisecond), true)
	if d := rt.watchExtended("x", t0.Add(hold)); d != 2*hold-hold {
		t.Fatalf("a follower arriving 400ms in extended the hold by %v at its end, want %v (capped at twice the hold)", d, hold)
	}
	rt.unwatchThread("x")
	if d := rt.watchExtended("x", t0); d != 0 {
		t.Fatalf("extension %v after the watcher left", d)
	}
}

// watchOK is rt.watchThread's verdict alone.
func watchOK(rt *Runtime, thread string, retry bool, now time.Time, hold time.Duration) bool {
	_, ok := rt.watchThread(thread, retry, now, hold)
	return ok
}
