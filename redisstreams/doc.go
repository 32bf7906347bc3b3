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
// across a failover, set [Options].LeaseSyncReplicas to the number of
// replicas: acquire and transfer then report a win only once WAIT saw every
// replica acknowledge the lease and its counter, and otherwise return an
// error (TestLeaseSyncFailover: no token handed out twice across a master
// kill; the cost is in BENCHMARKS.md). Across restarts, run Redis with
// appendfsync always (or LeaseSyncAOF on Redis 7.2+). The tests restart a
// server with appendfsync always (TestLeaseRestartAppendOnly) and fail over
// a Sentinel deployment (TestSentinelFailoverResumes) to show what survives.
//
// # Clients and deadlines
//
// [NewURL] builds a client that honours ctx deadlines (go-redis's
// ContextTimeoutEnabled, which a URL cannot set); [Options].ConfigureClient
// adjusts the rest. A client given to [New] should honour them too. With one
// that does not, leases still fail closed — a lease.Held ends at its own
// loss deadline whatever its renew calls do, and RenewLeases returns when
// its ctx ends — but single calls may block until the client's ReadTimeout
// when Redis stops answering; New logs a warning for such a client.
package redisstreams
