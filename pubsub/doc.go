// Package pubsub defines the event contract of leasebus: publish an [Event] to a
// topic, subscribe to a topic alone (fan-out) or as one member of a [Group]
// (competing consumers), ack a delivery by returning nil from the [Handler] and
// nack it by returning an error (or panicking).
//
// # Delivery guarantees
//
// Every [PubSub] backend keeps these rules; package pubsubtest checks each of
// them and any backend can run it:
//
//   - Durable publish: Publish returns only after the event is stored by the
//     backend. An event whose Publish returned nil is not lost by a crash of the
//     publisher.
//   - Fan-out: without [Group], every subscription receives each event
//     published after it started ([StartFrom] can move the start earlier).
//     After Unsubscribe a subscription receives nothing more. Topics are
//     independent.
//   - Groups: with [Group], each event goes to exactly one live member of the
//     group; different groups each receive every event. A member that stops
//     (Unsubscribe, Close) gives back to the group, once its handlers have
//     returned, the events it nacked and was to redeliver itself (also those
//     whose handler failed as it stopped): another member, or the next one to
//     subscribe, gets each promptly as its next attempt (counted towards
//     [MaxDeliveries]), not after the [AckDeadline]; a [ReadOnDemand] member
//     reads only when kicked, so it may get them only then (the backend's
//     documentation says when).
//   - At-least-once: a delivery that is not acked (handler error, panic, or no
//     answer within [AckDeadline] because the consumer died) is delivered
//     again, to the same subscription or to another member of its group, and
//     [Event.DeliveryAttempt] counts up. Handlers must therefore be idempotent.
//   - Dead letters: with [MaxDeliveries](n), an event that failed n attempts is
//     published to the topic "<topic>.dead" (see [DeadLetterTopic]) and acked on
//     the original topic. It is never dropped silently. Attempts are counted
//     per delivery: a delivery whose consumer died before it answered counts
//     (so an event that crashes its process each time is dead-lettered too),
//     and on a backend that reads ahead of its handlers (redisstreams) so does
//     an event a dying member read and never ran; see the backend's doc.
//   - Copies: each delivery (each attempt, to each subscription) gets its own
//     copy of the event: a handler may change its Data and Metadata without
//     another delivery seeing it.
//   - Order: with Concurrency(1) (the default), one subscription sees a topic's
//     events in publish order; a redelivery may break order only for the
//     redelivered event, and in a group an event another member held and
//     handed back (it stopped, or its handlers were stuck past the ack
//     deadline) or left behind (it died) may reach this member after later
//     events, as a first delivery.
//   - Errors: calls after Close return [ErrClosed]; bad input (an empty topic or
//     type, a nil handler, a negative option) returns an error wrapping
//     [ErrInvalid] that names the field.
//   - No leaks: when Unsubscribe or Close returns, no handler of that
//     subscription runs any more and its goroutines have exited.
//
// Exactly-once processing is not offered: use [Event.ID] to make effects
// idempotent.
//
// # Retention
//
// A backend keeps a topic's events for two reasons, and removes an event only
// when neither holds:
//
//   - A consumer group still needs it: it has not been delivered to the
//     group yet, or it was delivered and not acked. No trim ever removes such
//     an event, whatever the retention: a group that falls behind (or has no
//     member for a while) makes its topic's log grow until it catches up, and
//     a group nobody will read again should be removed with the topic
//     ([TopicDeleter]).
//   - It is one of the topic's newest Retention events: both leasebus
//     backends have an option Retention (default [DefaultRetention],
//     100,000; [RetainAll] keeps everything), and keep at least that many,
//     which is what StartFrom(Earliest) replays to a new group or fan-out
//     subscription.
//
// A group counts from the moment it exists: events published to a topic
// before any member of a group subscribed are kept only as the newest
// Retention events. To keep them for a group that will subscribe later,
// publish with [GroupPublisher] (PublishFor creates the group in the same
// step), as the signals runtime does for thread inboxes.
//
// Several events that must be stored in a given order, on one topic or
// more (a signal, then the notice that announces it), go out in one step
// with [BatchPublisher]: on redisstreams one pipeline, one round trip, when
// the topics are on one Redis server (on a Cluster: in one hash slot).
//
// Backends may keep more than that (they trim in steps, not on every
// publish). Fan-out subscriptions are not durable: an in-process backend
// never trims ahead of one, but a backend shared between processes may, once
// it falls more than Retention events behind. Each backend documents how it
// forgets topics nobody uses.
//
// # Delivery policy
//
// What happens around a handler call is the same on every backend because it
// is written once, as [Policy]: a panic is a nack, an event that failed
// [MaxDeliveries] attempts is dead-lettered and then acked, and a nacked event
// waits [RedeliveryDelay] (10ms by default, doubling per attempt up to 1s,
// or up to [RedeliveryCap]) before it is delivered again; on a group
// subscription with a Concurrency above 1 the wait holds no handler, so a
// nacked event never holds up the others. A backend makes one Policy per Subscribe with
// [NewPolicy] and only moves events: it reads them, sets
// [Event.DeliveryAttempt], acks, redelivers and claims.
//
// # Optional capabilities and wrappers
//
// A backend may have optional capabilities beyond PubSub (BatchPublisher,
// GroupPublisher, Kicker, BacklogReader, DrainedDeleter, TopicDeleter,
// EventChecker, ...), found with a type assertion. A wrapper (such as the otel module's) that
// does not pass one on but implements [Unwrapper] still lets [As] find it
// on what it wraps, the way errors.As walks wrapped errors; calls made
// through what As found go around the wrapper.
//
// # Many subscriptions
//
// A caller holding many group subscriptions that it knows, by other means,
// when to read (one per active thread, say) subscribes with [ReadOnDemand]
// and tells each one to read with [Kicker]: the subscription then reads only
// when kicked. On redisstreams no group subscription holds a connection of
// its own either way (a Backend's reads wait on one shared connection).
package pubsub
