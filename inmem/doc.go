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
package inmem
