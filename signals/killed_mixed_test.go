package signals_test

import "testing"

// mixedPrefix is the key prefix of TestKilledOwnerMixedSenderKeepsSignal.
const mixedPrefix = "km"

// TestKilledOwnerMixedSenderKeepsSignal: the inbox's expiry
// (pubsub.ExpireWhenDrained) is asked for by the owner's runtime when its
// own pubsub publishes signals with their group (groupPublishes), but the
// signals of a thread are sent by any process. Here the owner is on a
// plain redisstreams Backend and the sender goes through a wrapper without
// pubsub.GroupPublisher or BatchPublisher (plainWrap): its plain Publish
// leaves the expiry the dead owner's ack set. With an expiry of 3 first
// waits and 2 TTLs (13s here) the inbox expired with the accepted signal
// unread (review h63: failed 2 of 2). The expiry is now at least 10
// minutes (minInboxExpiry), so the signal survives this 16s outage and a
// runtime that comes back runs it; one that comes back only after the
// floor finds it gone (signals doc, "What a thread leaves behind").
func TestKilledOwnerMixedSenderKeepsSignal(t *testing.T) {
	killedOwnerKeepsSignal(t, mixedPrefix, "linger-mixed", "TestWorkerLingerMixed", false)
}

// TestWorkerLingerMixed is the worker process of
// TestKilledOwnerMixedSenderKeepsSignal: on a plain Backend it runs one
// signal on thread t0 with a 3s linger time, says "lingering" once it ran,
// and waits to be killed.
func TestWorkerLingerMixed(t *testing.T) {
	lingerOneWorker(t, "linger-mixed", mixedPrefix, false)
}
