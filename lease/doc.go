// Package lease defines the lease contract of leasebus: time-bounded exclusive
// ownership of a key, with fencing tokens, renewal, atomic gap-free transfer
// and holder introspection.
//
// A backend that can coordinate a lock implements [Provider]; one that cannot
// simply omits the methods, and callers detect the capability with
// [ProviderOf], which falls back to the always-win [Noop].
//
// # Contract
//
// Every Provider keeps these rules (package leasetest checks each of them):
//
//   - Acquire of a free or expired key wins. Acquire of a key held by another
//     owner loses and names the holder, its token and the time left.
//     Re-acquire by the holder wins and refreshes the TTL, keeping the token.
//   - Each new tenure (an acquire of a free or expired key, or a transfer)
//     gets a fencing token strictly greater than every earlier token of that
//     key, across expiry and release too. Tokens never go backwards, so a
//     resource that remembers the highest token it saw can reject the writes
//     of a stale holder. Tokens are opaque: only their order means anything
//     (inmem counts up across all its keys; redisstreams takes the server clock in
//     microseconds when a key's counter has expired, so its tokens are
//     large).
//   - Renew extends only a live lease held by the owner; it never re-creates
//     an expired one.
//   - Release deletes the lease only when the owner holds it: a stale owner
//     never clobbers a new holder.
//   - Transfer is one atomic step: the key is never free between the old and
//     the new owner; it fails (false) when the old owner no longer holds it;
//     the new owner gets a new token and a full TTL.
//   - Each operation is one round trip to the backend.
//   - Bad input (an empty key or owner, ttl <= 0, from == to) returns an error
//     wrapping [ErrInvalid] that names the field; after the backend closed,
//     [ErrClosed]. A failure is never reported as "not acquired".
//
// Beyond the five methods: [HeldError] describes contention, [Keep] holds a
// lease and renews it in the background (batching renewals when the provider
// implements [BatchRenewer], and handing it over in one call when it
// implements [TokenTransferer]), [Wait] blocks until a lease is acquired, the
// optional [Inspector] lists leases for operators, and the optional [Revoker]
// takes a lease away from its holder ([ErrRevoked], [RevokedError]; a revoke
// that is not forced never creates two holders; with the optional
// [TokenRevoker], only the tenure of a given fencing token) and reports
// whether a lease is active, released, expired or revoked ([Status], within
// [StatusWindow]).
//
// # Fail-closed
//
// A [Held] (from [Keep]) has a loss deadline of its own: the start, on the
// monotonic clock, of its last successful acquire, renew or transfer call
// (the transfer that made it, on a [TokenTransferer]), plus the TTL, minus
// a margin of TTL/10 (with the default renew interval of TTL/3).
// From that instant its Err is non-nil, its Context is cancelled and Done
// is closed — whatever its renew calls are doing, even if one never returns
// (a black-holed network, a client that ignores ctx deadlines), and however
// long other Helds' renewals take. The backend cannot expire the lease
// before start + TTL, so the holder has stopped before anyone else can hold
// the key, as long as the backend keeps the lease: one that loses it (on
// Redis, a restart without persistence, FLUSHALL, a failover to a replica
// that had not received it: redisstreams, "Durability") lets another owner
// acquire the key at once, with a higher token, while the Held lives on
// until its next renewal is refused, up to one renew interval and that
// call later. A Held.Transfer whose outcome is unknown (a transport error) ends
// the Held at once: the transfer may still run at any later time and hand
// the key over (see [Held.Transfer]). Run the guarded work under
// Held.Context, and bound a write that must happen while the lease is held
// by Held.Deadline. The leasetest rule
// NeverReturningCallCannotKeepHeldAlive holds every backend to this.
//
// A lease is not a lock on the outside world: a holder paused longer than its
// TTL (GC, SIGSTOP, a partition) may still act after losing it. Pass the
// fencing token to the resource you protect and let it reject old tokens.
package lease
