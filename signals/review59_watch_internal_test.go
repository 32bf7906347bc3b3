package signals

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestReview59BurstWatchesForgotten: a burst of 5,000 threads watched once
// each (their done records holding 256 IDs, as busy threads' do), then a
// trickle of 600 more watched over the next 10 minutes. The watch table
// holds "the threads checked within about a recovery interval" (watch.go),
// so the burst's entries, and the done records they copy, must be gone;
// the doubling sweep keeps every one until the table doubles again.
func TestReview59BurstWatchesForgotten(t *testing.T) {
	rt := &Runtime{cfg: config{recovery: time.Second}}
	ids := make([]string, DedupeEntries)
	for i := range ids {
		ids[i] = fmt.Sprintf("%036d", i)
	}
	rec := strings.Join(ids, ",")
	t0 := time.Now()
	watch := func(thread string, at time.Time) {
		if !rt.watchThread(thread, false, at) {
			t.Fatalf("watch of %s refused", thread)
		}
		rt.watchedRecord(thread, strings.Clone(rec), at) // a record read from Redis is a string of its own
		rt.unwatchThread(thread)
	}
	for i := range 5000 {
		watch(fmt.Sprint("burst", i), t0)
	}
	for i := range 600 {
		watch(fmt.Sprint("trickle", i), t0.Add(time.Minute+time.Duration(i)*time.Second))
	}
	old, bytes := 0, 0
	for k, w := range rt.watching {
		if strings.HasPrefix(k, "burst") {
			old++
			bytes += len(w.rec)
		}
	}
	if old > watchSweepMin {
		t.Fatalf("%d of 5,000 watches last checked 10 minutes ago still kept, with %d KiB of done records (table %d entries, recovery interval %v)",
			old, bytes>>10, len(rt.watching), rt.cfg.recovery)
	}
}
