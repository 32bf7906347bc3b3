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

// LeaseRevokeCall returns the call mark of one revoke call of lease key
// (nonce: the call's own random nonce), in the lease key's slot:
// <prefix>:revcall:{<key>}:<nonce>. It exists once that call's script ran
// and answered that the lease is revoked, so that the same call run again (a
// client's retry after a lost reply) is told so rather than run twice; a
// mark of its own per call, so that no other revoke call can erase it. It
// expires a status window after the end the lease had when the call ran.
func (s Space) LeaseRevokeCall(key, nonce string) string {
	return s.tagged("revcall", key) + ":" + nonce
}
