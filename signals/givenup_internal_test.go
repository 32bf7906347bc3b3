package signals

import (
	"fmt"
	"testing"
	"time"
)

// TestGivenUpBounded: the calls of unknown outcome (givenup.go) are found
// by thread and owner while younger than givenUpFor; a thread keeps at most
// givenUpPerThread owners (the newest; noting one again makes it the
// newest); and the map holds at most givenUpMax threads: when it is full
// of young entries an eighth of it is forgotten at once, so that inserts
// stay O(1), and old entries are swept.
func TestGivenUpBounded(t *testing.T) {
	rt := &Runtime{}
	t0 := time.Unix(1_000_000, 0)
	for i := range givenUpPerThread + 2 {
		rt.noteGivenUp("th", fmt.Sprint("run", i), fmt.Sprint("p/run", i), t0.Add(time.Duration(i)*time.Second))
	}
	if n := len(rt.givenUp["th"]); n != givenUpPerThread {
		t.Fatalf("%d entries for one thread, want %d", n, givenUpPerThread)
	}
	now := t0.Add(time.Minute)
	if _, ok := rt.givenUpRun("th", "p/run0", now); ok {
		t.Error("the oldest entry of a full thread was kept")
	}
	// Noted again, run2 becomes the newest: a new note drops run3, not it.
	rt.noteGivenUp("th", "run2", "p/run2", now)
	rt.noteGivenUp("th", "run9", "p/run9", now)
	for owner, want := range map[string]bool{"p/run2": true, "p/run3": false, "p/run9": true} {
		if _, ok := rt.givenUpRun("th", owner, now); ok != want {
			t.Errorf("after the re-note: %s found %v, want %v", owner, ok, want)
		}
	}
	if run, ok := rt.givenUpRun("th", "p/run9", now); !ok || run != "run9" {
		t.Errorf("newest entry: %q, %v", run, ok)
	}
	if _, ok := rt.givenUpRun("other", "p/run9", now); ok || rt.hasGivenUp("other", now) {
		t.Error("an entry was found under another thread")
	}
	if !rt.hasGivenUp("th", now) {
		t.Error("hasGivenUp: false for a thread with entries")
	}

	// Full of young entries: an eighth goes at once.
	rt = &Runtime{}
	for i := range givenUpMax {
		rt.noteGivenUp(fmt.Sprint("t", i), "r", "p/r", t0)
	}
	rt.noteGivenUp("new", "r", "p/r", t0.Add(time.Minute))
	if n := len(rt.givenUp); n != givenUpMax-givenUpMax/8+1 || rt.guLen.Load() != int64(n) {
		t.Fatalf("full: %d threads (len %d), want %d", n, rt.guLen.Load(), givenUpMax-givenUpMax/8+1)
	}
	if !rt.hasGivenUp("new", t0.Add(time.Minute)) {
		t.Error("full: the new thread was not kept")
	}
}

// TestGivenUpSweptWhenExpired: entries go as soon as the oldest has
// expired, on the next note or lookup, whatever the map's size, so that the
// paths that consult it cost one atomic load again (review revN: one
// entry stayed, with guLen 1, an hour after it expired, since the map was
// swept only when full).
func TestGivenUpSweptWhenExpired(t *testing.T) {
	rt := &Runtime{}
	t0 := time.Unix(1_000_000, 0)
	rt.noteGivenUp("th", "run", "p/run", t0)
	rt.noteGivenUp("th2", "run", "p/run", t0.Add(time.Minute))
	later := t0.Add(givenUpFor + time.Second)
	if _, ok := rt.givenUpRun("th", "p/run", later); ok {
		t.Fatal("an expired entry was found")
	}
	if n := rt.guLen.Load(); n != 1 {
		t.Errorf("after the first expired: guLen %d, want 1", n)
	}
	if !rt.hasGivenUp("th2", later) {
		t.Error("a young entry went with the sweep")
	}
	if rt.hasGivenUp("th2", t0.Add(time.Minute+givenUpFor)) || rt.guLen.Load() != 0 || len(rt.givenUp) != 0 {
		t.Errorf("after both expired: guLen %d, map %v; want empty", rt.guLen.Load(), rt.givenUp)
	}
	if !rt.guSweepAt.IsZero() {
		t.Errorf("next sweep %v with nothing left, want none", rt.guSweepAt)
	}
}
