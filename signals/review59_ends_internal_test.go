package signals

import (
	"fmt"
	"testing"
	"time"
)

// TestReview59BurstEndsForgotten: a long-lived runtime sees a burst of
// 20,000 distinct threads, then a trickle of new ones (3,000 over the next
// 50 minutes). The tenure-end table's own contract (noteTenureEnd: it
// "forgets entries older than noticeSeenTTL once it holds noticeSeenMax of
// them") says the burst's entries, older than 10 minutes and far beyond
// 4,096, are gone by then; the doubling sweep keeps every one of them until
// the table doubles again (40,000 entries), which a quiet service may never
// reach: the process keeps the largest burst it ever saw.
func TestReview59BurstEndsForgotten(t *testing.T) {
	rt := &Runtime{}
	t0 := time.Now()
	for i := range 20_000 {
		rt.noteTenureEndAt(fmt.Sprint("burst", i), t0, true, true, t0)
	}
	for i := range 3000 {
		at := t0.Add(11*time.Minute + time.Duration(i)*time.Second)
		rt.noteTenureEndAt(fmt.Sprint("trickle", i), at, true, true, at)
	}
	old := 0
	for k := range rt.ends {
		if len(k) > 5 && k[:5] == "burst" {
			old++
		}
	}
	if old > noticeSeenMax {
		t.Fatalf("%d of 20,000 tenure ends older than %v still kept (table %d entries) after 3,000 later inserts; want them forgotten once the table holds %d",
			old, noticeSeenTTL, len(rt.ends), noticeSeenMax)
	}
}
