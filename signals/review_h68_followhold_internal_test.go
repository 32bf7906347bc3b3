package signals

import (
	"testing"
	"time"
)

// TestReviewH68FollowerHoldsNoSlot (review h68): notice handlers are a
// fixed number of slots (WithWorkConcurrency), and noticeHold's doc says
// none waits longer than noticeHold (250ms at most) and only one per
// thread (the watcher) waits at all, so that notices of a busy thread
// never keep a notice of another thread (a dead owner's) from being
// handled. A follower whose signal ran here now waits for the inbox ack
// (awaitAck) up to followAckWait, a second: on a slow or stalled inbox
// master every follower of every such thread held its slot for a second.
func TestReviewH68FollowerHoldsNoSlot(t *testing.T) {
	rt := &Runtime{cfg: config{recovery: time.Minute, ttl: 2 * time.Minute}, sessions: map[string]*session{}}
	s := &session{rt: rt, thread: "x", ended: make(chan struct{})}
	rt.sessions["x"] = s
	s.ackStarted("s1") // its inbox ack is not written yet (the master is slow)
	rt.done.add("x", "s1")
	start := time.Now()
	err := rt.followNotice("x", "s1", "n1", time.Now())
	held := time.Since(start)
	if err == nil {
		t.Fatal("the follower acked the notice before the inbox ack")
	}
	if held > 200*time.Millisecond {
		t.Fatalf("a follower held its handler slot %v (noticeHold: 250ms at most, and only the watcher waits)", held.Round(time.Millisecond))
	}
}
