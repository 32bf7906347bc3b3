package signals

import (
	"fmt"
	"testing"
	"time"
)

// TestNoticeTablesSweepRarely: the notice and tenure-end tables sweep for
// old entries when they reach noticeSeenMax, then only once they doubled
// what the last sweep left, not on every insert (found by review: with
// more than noticeSeenMax young entries, a deep backlog or many threads,
// every insert scanned the whole table under one lock). Old entries still
// go at the next sweep.
func TestNoticeTablesSweepRarely(t *testing.T) {
	rt := &Runtime{}
	now := time.Now()
	old := now.Add(-2 * noticeSeenTTL)
	const n = 5 * noticeSeenMax
	sweepsSeen, sweepsEnds := 0, 0
	lastSeen, lastEnds := 0, 0
	for i := range n {
		at := now
		if i < noticeSeenMax/2 {
			at = old // the first ones are old: the first sweep drops them
		}
		rt.noticeSeen(fmt.Sprint("n", i), "t", fmt.Sprint("s", i), at)
		rt.noteTenureEndAt(fmt.Sprint("t", i), at, true, false, at)
		if rt.seenSweepAt != lastSeen {
			sweepsSeen++
			lastSeen = rt.seenSweepAt
		}
		if rt.endsSweepAt != lastEnds {
			sweepsEnds++
			lastEnds = rt.endsSweepAt
		}
	}
	// Sizes at the sweeps: 4096 (2048 left), 4096, 8192, 16384: a handful,
	// not one per insert past 4096.
	if sweepsSeen > 6 || sweepsEnds > 6 {
		t.Fatalf("%d and %d sweeps for %d inserts; want a handful (doubling)", sweepsSeen, sweepsEnds, n)
	}
	if len(rt.seen) != n-noticeSeenMax/2 || len(rt.ends) != n-noticeSeenMax/2 {
		t.Fatalf("tables hold %d and %d entries, want %d: the old ones swept, no young one", len(rt.seen), len(rt.ends), n-noticeSeenMax/2)
	}
}
