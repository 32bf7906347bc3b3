package keys

// LeaseState returns the state record key of lease key, in the lease key's
// slot: <prefix>:lstate:{<key>}. It holds what the lease scripts remember of
// the key's latest tenure (holder, token, revoked or released), and expires
// a status window after the lease ended.
func (s Space) LeaseState(key string) string { return s.tagged("lstate", key) }

// LeaseRevoked returns the revoked mark key of lease key, in the lease
// key's slot: <prefix>:revoked:{<key>}. It holds the owner whose tenure was
// revoked, and exists only from the revoke until a new tenure starts (or a
// status window after the lease ended).
func (s Space) LeaseRevoked(key string) string { return s.tagged("revoked", key) }

// LeaseRevokeCall returns the revoke call mark of lease key, in the lease
// key's slot: <prefix>:revcall:{<key>}. It holds the nonce of the latest
// revoke call that revoked the key's lease, so that the same call run again
// (a client's retry after a lost reply) is told it ran rather than run
// twice; it expires a status window after the lease ended.
func (s Space) LeaseRevokeCall(key string) string { return s.tagged("revcall", key) }
