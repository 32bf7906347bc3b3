package signals

import (
	"fmt"
	"testing"
	"time"
)

// TestGivenUpBounded: the given-up acquires (givenup.go) are found by
// thread and owner while younger than givenUpFor, keep at most
// givenUpPerThread per thread (the newest), go when taken over, and the
// map holds at most givenUpMax threads: old entries are swept, and when
// none is old the thread whose newest entry is oldest is forgotten.
func TestGivenUpBounded(t *testing.T) {
	rt := &Runtime{}
	t0 := time.Unix(1_000_000, 0)
	for i := range givenUpPerThread + 2 {
		rt.noteGivenUp("th", fmt.Sprint("run", i), fmt.Sprint("p/run", i), t0.Add(time.Duration(i)*time.Second))
	}
	if n := len(rt.givenUp["th"]); n != givenUpPerThread {
		t.Fatalf("%d entries for one thread, want %d", n, givenUpPerThread)
	}
	if _, ok := rt.givenUpRun("th", "p/run0", t0.Add(time.Minute)); ok {
		t.Error("the oldest entry of a full thread was kept")
	}
	last := fmt.Sprint("p/run", givenUpPerThread+1)
	if run, ok := rt.givenUpRun("th", last, t0.Add(time.Minute)); !ok || run != fmt.Sprint("run", givenUpPerThread+1) {
		t.Errorf("newest entry: %q, %v", run, ok)
	}
	if _, ok := rt.givenUpRun("th", last, t0.Add(givenUpFor+time.Hour)); ok {
		t.Error("an entry older than givenUpFor was found")
	}
	if _, ok := rt.givenUpRun("other", last, t0); ok {
		t.Error("an entry was found under another thread")
	}
	for i := 2; i < givenUpPerThread+2; i++ {
		rt.forgetGivenUp("th", fmt.Sprint("p/run", i))
	}
	if _, ok := rt.givenUp["th"]; ok || rt.guLen.Load() != 0 {
		t.Fatalf("taken over, the thread's entry stayed: %v, len %d", rt.givenUp["th"], rt.guLen.Load())
	}

	// Full of young entries: the oldest thread goes, one per new thread.
	for i := range givenUpMax {
		rt.noteGivenUp(fmt.Sprint("t", i), "r", "p/r", t0.Add(time.Duration(i)*time.Millisecond))
	}
	rt.noteGivenUp("new", "r", "p/r", t0.Add(time.Minute))
	if n := len(rt.givenUp); n != givenUpMax {
		t.Fatalf("%d threads, want %d", n, givenUpMax)
	}
	if _, ok := rt.givenUp["t0"]; ok {
		t.Error("full: the oldest thread was kept")
	}
	// Full of old entries: one sweep forgets them all.
	rt.noteGivenUp("newer", "r", "p/r", t0.Add(givenUpFor+time.Hour))
	if n := len(rt.givenUp); n != 1 || rt.guLen.Load() != 1 {
		t.Fatalf("after the sweep: %d threads (len %d), want 1", n, rt.guLen.Load())
	}
}
