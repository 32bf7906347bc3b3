package signals

import (
	"testing"
	"time"
)

// TestFollowerMeetsLeavingWatcher (review 12 of 2026-11-23, failed before
// the try was owed inside watchThread) replays, step by step, the
// interleaving of handleNotice in two handler goroutines of one process:
// a first delivery of a notice of thread x finds a watcher active
// (watchThread returns false, so handleNotice calls followNotice next);
// before followNotice takes watchMu, the watcher returns and leaves
// (unwatchThread). followNotice then finds no active watcher, records no
// owed try, and nacks: nobody tries the lease after this notice came. If
// its signal was sent to a tenure that released before the notice was
// published (the case the owed try exists for, watch.go), the signal
// waits for the notice's redelivery, a recovery interval.
func TestFollowerMeetsLeavingWatcher(t *testing.T) {
	rt := &Runtime{cfg: config{recovery: time.Minute, ttl: 2 * time.Minute}, sessions: map[string]*session{}}
	now := time.Now()
	if !rt.watchThread("x", false, now) { // the watcher
		t.Fatal("not made watcher")
	}
	rt.watchTrying("x") // its try, before the follower's notice came
	// The follower's first delivery: told to follow.
	if rt.watchThread("x", false, now) {
		t.Fatal("a second handler was made watcher")
	}
	// The watcher leaves now, before followNotice ran: it owes nothing yet.
	owedAtLeave := rt.unwatchThread("x")
	// The follower goes on.
	err := rt.followNotice("x", "s3", "n", now)
	if err == nil {
		t.Fatal("follower acked")
	}
	// Is anyone going to try the lease for s3's notice now? The watcher
	// is gone (settleOwed runs only if unwatchThread reported a debt), and
	// no entry owes anything.
	owedLater := false
	if w := rt.watching["x"]; w != nil && w.owed {
		owedLater = true
	}
	if !owedAtLeave && !owedLater {
		t.Fatalf("first delivery nacked (%v) with no try of the lease owed after it came: the watcher left between the follower's watchThread and followNotice", err)
	}
}
