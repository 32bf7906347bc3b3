// Package redisstreams is the Redis backend of leasebus: one [Backend] value
// implements pubsub.PubSub on Redis Streams and lease.Provider (with
// lease.Inspector and lease.BatchRenewer) on Lua scripts, for standalone,
// Sentinel and Cluster deployments.
//
// Every key one script or transaction touches shares one Cluster hash tag;
// user-given names are escaped so that no name can change another's slot.
// The caller owns a client passed to [New]; the Backend never closes it.
package redisstreams
