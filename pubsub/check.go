package pubsub

// EventChecker is an optional capability of a PubSub: tell, without
// publishing anything, whether Publish would refuse an event for what it
// is. Find it with [As]. The signals runtime uses it to refuse a signal
// its backend would not store (one over redisstreams' MaxEventSize, say)
// before it takes the thread's lease, so that a refused signal starts no
// tenure.
type EventChecker interface {
	// CheckEvent returns the error, wrapping ErrInvalid, that a Publish of
	// e to topic would return for the topic's name or for e (invalid
	// fields, or over a size limit), and nil when Publish would take it
	// (it may still fail for other reasons: a closed PubSub, a server
	// that does not answer). It sends nothing and does not change e.
	CheckEvent(topic string, e Event) error
}
