package signals

import (
	"fmt"
	"testing"
	"time"
)

// TestReviewH61SweepsKeepWhatIsNeeded (review h61, held): the time-driven
// sweeps (review h59) drop nothing still needed. With injected clocks: a
// watch a handler holds (active) for far longer than the recovery interval,
// and one checked within it, survive sweeps at every later insert; a notice
// seen within noticeSeenTTL keeps its first-received time, and a tenure end
// within noticeSeenTTL still settles a notice received before that tenure,
// while entries 11 minutes old are swept.
func TestReviewH61SweepsKeepWhatIsNeeded(t *testing.T) {
	t0 := time.Now()
	rt := &Runtime{cfg: config{recovery: time.Second}}
	if !rt.watchThread("held", false, t0) {
		t.Fatal("watch of held refused")
	}
	for i := range 3 * watchSweepMin {
		at := t0.Add(time.Duration(i) * 10 * time.Millisecond)
		if i == 3*watchSweepMin-50 {
			if !rt.watchThread("recent", false, at) {
				t.Fatal("watch of recent refused")
			}
			rt.watchedRecord("recent", "s1", at)
			rt.unwatchThread("recent")
		}
		if !rt.watchThread(fmt.Sprint("w", i), false, at) {
			t.Fatal("watch refused")
		}
		rt.watchedRecord(fmt.Sprint("w", i), "x", at)
		rt.unwatchThread(fmt.Sprint("w", i))
	}
	end := t0.Add(time.Duration(3*watchSweepMin) * 10 * time.Millisecond)
	if w := rt.watching["held"]; w == nil || !w.active {
		t.Fatalf("the active watch of held was swept (%d entries left)", len(rt.watching))
	}
	if w := rt.watching["recent"]; w == nil || w.rec != "s1" || end.Sub(w.checked) >= rt.cfg.recovery {
		t.Fatal("the watch of recent, checked within the recovery interval, was swept")
	}
	if rt.watchThread("held", false, end) {
		t.Fatal("a second watcher of held: its watch was forgotten")
	}

	if len(rt.watching) > watchSweepMin+200 {
		t.Fatalf("%d watches kept: the sweeps did not run", len(rt.watching))
	}

	rt2 := &Runtime{}
	rt2.noticeSeen("old", "oldt", "s", t0.Add(-2*time.Minute))
	rt2.noteTenureEndAt("oldt", t0.Add(-3*time.Minute), true, true, t0.Add(-2*time.Minute))
	first := rt2.noticeSeen("n0", "th", "s0", t0)
	rt2.noteTenureEndAt("th", t0.Add(time.Second), true, true, t0.Add(2*time.Second))
	for i := range 3 * noticeSeenMax {
		at := t0.Add(9*time.Minute + time.Duration(i)*time.Millisecond)
		rt2.noticeSeen(fmt.Sprint("n", i+1), fmt.Sprint("t", i), "s", at)
		rt2.noteTenureEndAt(fmt.Sprint("t", i), at, true, true, at)
	}
	at := t0.Add(9*time.Minute + 59*time.Second)
	if got := rt2.noticeSeen("n0", "th", "s0", at); !got.Equal(first) {
		t.Fatalf("notice seen at %v now counts as first received at %v", first, got)
	}
	if _, ok := rt2.seen["old"]; ok || rt2.ends["oldt"] != nil {
		t.Fatal("entries 11 minutes old kept: the sweeps did not run")
	}
	if !rt2.settledByTenures("th", first) {
		t.Fatal("a drained tenure that ended 9m57s ago no longer settles the notice received before it")
	}
}
