package signals

import (
	"testing"
	"time"
)

// TestReviewH68FollowerDoneWaitsForInboxAck (review h68): the owner acks a
// signal's wake notice only after the signal's inbox entry (doc.go, What a
// thread leaves behind). A follower (followNotice: another handler of this
// process watches the thread) whose signal the local tenure just ran finds
// it in the done cache (the run adds it there before it hands the verdict
// to the inbox handler, so before the ack is even queued) and returned nil
// at once: its notice's ack could go before the inbox ack (on a Cluster,
// to another master), and a process killed in between leaves no notice
// and the inbox for ever, as TestReviewH68NoticeAckWaitsForSlowInboxAck
// shows for the watcher.
func TestReviewH68FollowerDoneWaitsForInboxAck(t *testing.T) {
	rt := &Runtime{cfg: config{recovery: time.Minute, ttl: 2 * time.Minute}, sessions: map[string]*session{}}
	s := &session{rt: rt, thread: "x", ended: make(chan struct{})}
	rt.sessions["x"] = s
	// The run of s1 is over: done cache, then the verdict, and the inbox
	// delivery's ack is still to be written.
	s.ackStarted("s1")
	rt.done.add("x", "s1")
	if err := rt.followNotice("x", "s1", "n1", time.Now()); err == nil {
		t.Fatal("the follower acked the notice of s1 while its inbox ack was not written")
	}
	// Once the inbox ack is written, the notice is acked.
	s.ackFinished("s1")
	if err := rt.followNotice("x", "s1", "n1", time.Now()); err != nil {
		t.Fatalf("after the inbox ack: %v", err)
	}
}
