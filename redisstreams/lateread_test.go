package redisstreams

import "testing"

// TestLateReadAfterChecksRunsNothing: a group read held in the network (a
// proxy keeps its bytes) past go-redis's ReadTimeout, and delivered to the
// server only after the subscription's later reads succeeded and its
// lost-read checks ended, as a TCP retransmission after a partition heals
// delivers a request whose client gave up. The server must not run it:
// before reads were guarded (a per-consumer read sequence checked in the
// read script), it did, delivering e2 (published meanwhile) to the consumer
// unseen, so that the reclaim pass took it after AckDeadline as attempt 2
// and, under MaxDeliveries(1), dead-lettered it without any handler
// running it. Found by review 5 of 2026-11-22.
func TestLateReadAfterChecksRunsNothing(t *testing.T) {
	t.Parallel()
	r := newLateRig(t)
	r.publish("e1")
	r.holdNextRead()
	// Later reads go on other connections: e1 runs, and the checks for
	// what the failed read might have delivered end.
	r.waitFor("e1 run", func() bool { return r.ranAll("e1#1") })
	r.waitChecksEnded()

	r.publish("e2") // not kicked: only the late read could take it now
	if n := r.px.Release(); n != 1 {
		t.Fatalf("released %d held connections, want 1", n)
	}
	r.waitFor("e2 run", func() bool { return r.ranAll("e1#1", "e2#1") || r.dead.Load() > 0 })
	if !r.ranAll("e1#1", "e2#1") {
		t.Fatalf("ran %v and dead-lettered %d; want e1#1 e2#1 and nothing dead-lettered", r.result(), r.dead.Load())
	}
	if r.dead.Load() > 0 {
		t.Fatalf("%d dead-lettered", r.dead.Load())
	}
}
