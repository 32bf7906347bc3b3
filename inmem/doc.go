// Package inmem is the in-process backend of leasebus: one [Backend] value
// implements pubsub.PubSub, lease.Provider, lease.Inspector and
// lease.BatchRenewer for the goroutines of one process. It is the embedded
// default, for tests and local runs; it keeps nothing across restarts and
// coordinates nothing across processes (use package redisstreams for that).
//
// It keeps the same contracts as every other backend (it passes packages
// pubsubtest and leasetest), including groups, ack deadlines, redelivery,
// dead letters and fencing tokens. Lease time comes from an injectable
// [Clock], so tests can move time without sleeping.
//
// # What it keeps
//
// Per topic, the Backend keeps the events a group has not acked or a fan-out
// subscription has not read, plus at least the newest [Options].Retention
// (pubsub.DefaultRetention, 100,000, as on every leasebus backend): see
// "Retention" in package pubsub. A topic nobody uses is forgotten, with its
// events and groups, [Options].TopicIdleTTL (ten minutes by default) after
// its last publish or subscription, once it has no fan-out subscription and
// each of its groups has had no member for that long and has read and acked
// every event; a group with an unread or unacked event is never forgotten.
// The Backend implements pubsub.TopicDeleter: DeleteTopic removes a topic's
// events and groups at once. TestAbandonedTopicsAreForgotten uses 10,000
// topics with a group each and 10,000 lease keys, then moves its clock past
// the idle time: the heap after GC comes back within 256 KiB of where it
// started.
//
// A released lease leaves only a mark of how its latest tenure ended (for
// LeaseState: released, revoked, expired), and an expired one is dropped
// when it is next looked at; both go by the sweep of the whole lease table
// that a new tenure of any key runs at most once a minute (by the Clock),
// the marks once they are older than lease.StatusWindow. So the table
// holds the live leases, and the marks of the leases that ended within
// the StatusWindow before the latest sweep. Fencing tokens come
// from one counter for the whole Backend: each new tenure of any key takes
// the next value, so the tokens of a key only grow, without a per-key
// counter to keep.
package inmem
