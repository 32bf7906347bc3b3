// Package redisstreams is the Redis backend of leasebus: one [Backend] value
// implements pubsub.PubSub on Redis Streams and lease.Provider (with
// lease.Inspector and lease.BatchRenewer) on Lua scripts, for standalone,
// Sentinel and Cluster deployments.
//
// Every key one script or transaction touches shares one Cluster hash tag;
// user-given names are escaped so that no name can change another's slot.
// The caller owns a client passed to [New]; the Backend never closes it.
//
// # Durability
//
// Events, leases and fencing counters are as durable as the Redis deployment
// that holds them. Redis replicates asynchronously: after a Sentinel or
// Cluster failover, writes the old primary acknowledged but had not yet
// replicated are gone, and so are writes not yet on disk when a server
// restarts (with appendonly no, everything; with appendfsync everysec, up
// to about a second). A lost write can be a published event, a lease (which
// then looks free) or an increment of a fencing counter, so a later tenure
// can be given a token that was already handed out. Where fencing must hold
// across such failures, run Redis with appendfsync always and without
// failover, or have the protected resource also compare the holder's
// identity. The tests restart a server with appendfsync always
// (TestLeaseRestartAppendOnly) and fail over a Sentinel deployment
// (TestSentinelFailoverResumes) to show what survives.
package redisstreams
