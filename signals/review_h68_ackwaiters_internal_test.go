package signals

import (
	"testing"
	"time"
)

// TestReviewH68AwaitAckDropsWaiterThatGaveUp (review h68): a notice
// handler whose awaitAck gives up (its hold fired, or Close began) while
// the inbox ack is not finished left its channel in session.ackWaiters
// until that ack finished; an ack that never finishes (the hook is not
// fired: a Shutdown that gave up, or a backend that never writes it) kept
// one channel per retry of the notice for the rest of the tenure.
func TestReviewH68AwaitAckDropsWaiterThatGaveUp(t *testing.T) {
	s := &session{ended: make(chan struct{})}
	s.ackStarted("sig")
	fired := make(chan time.Time)
	close(fired) // a hold that fired
	closing := make(chan struct{})
	for range 100 {
		s.awaitAck("sig", fired, closing)
	}
	s.mu.Lock()
	n := len(s.ackWaiters["sig"])
	s.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d waiters left in ackWaiters after 100 awaitAck calls that gave up", n)
	}
	s.ackFinished("sig")
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.unacked) != 0 || len(s.ackWaiters) != 0 {
		t.Fatalf("after the ack finished: unacked %v, ackWaiters %d", s.unacked, len(s.ackWaiters))
	}
}
