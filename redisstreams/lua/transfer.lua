-- transfer.lua: hand a lease from one owner to another in one atomic step.
--
-- KEYS[1]  lease key; its value is the owner
-- KEYS[2]  fencing counter of the lease (same hash slot; no TTL; never deleted)
-- KEYS[3]  state record of the lease (see revoke.lua)
-- KEYS[4]  revoked mark of the lease (see revoke.lua)
-- ARGV[1]  fromOwner
-- ARGV[2]  toOwner
-- ARGV[3]  ttl in milliseconds (the server's clock counts it)
-- ARGV[4]  status window in milliseconds
--
-- Returns the new owner's token (> 0) when fromOwner held the lease, else 0;
-- {reason} when fromOwner's tenure was revoked (nothing changes). The lease
-- key is overwritten, never deleted, so it is never free between the two
-- owners; the new tenure starts a fresh state record.
if redis.call('GET', KEYS[4]) == ARGV[1] then
  return {redis.call('HGET', KEYS[3], 'r')}
end
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
local tok = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
redis.call('HSET', KEYS[3], 'o', ARGV[2], 't', tok, 's', '', 'r', '', 'f', '', 'e', '')
redis.call('PEXPIRE', KEYS[3], ARGV[3] + ARGV[4])
return tok
