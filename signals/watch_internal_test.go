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

// TestWatchOwesFollowersATry: a follower's first delivery makes the
// watcher owe one more try of the lease, settled by its next try (or a
// local tenure found) or, when it leaves first, by unwatchThread's report;
// a redelivered follower owes nothing, and a new watch starts owing nothing.
func TestWatchOwesFollowersATry(t *testing.T) {
	rt := &Runtime{cfg: config{recovery: time.Second, ttl: 10 * time.Second}}
	t0 := time.Now()
	if !watchOK(rt, "x", false, t0, 0) {
		t.Fatal("not made watcher")
	}
	watchOK(rt, "x", true, t0, 0)
	if rt.unwatchThread("x") {
		t.Fatal("a redelivered follower left a try owed")
	}
	watchOK(rt, "x", false, t0, 0)
	watchOK(rt, "x", false, t0, 0)
	rt.watchTrying("x")
	if rt.unwatchThread("x") {
		t.Fatal("a try owed although the watcher tried after the follower came")
	}
	watchOK(rt, "x", false, t0, 0)
	rt.watchTrying("x")
	watchOK(rt, "x", false, t0, 0) // came during the try
	if !rt.unwatchThread("x") {
		t.Fatal("no try owed to a follower that came after the watcher's latest try began")
	}
	watchOK(rt, "x", false, t0, 0)
	if rt.unwatchThread("x") {
		t.Fatal("a new watch started owing a try")
	}
}

// watchOK is rt.watchThread's verdict alone.
func watchOK(rt *Runtime, thread string, retry bool, now time.Time, _ time.Duration) bool {
	return rt.watchThread(thread, retry, now)
}
