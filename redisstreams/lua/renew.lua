-- renew.lua: extend a live lease the caller holds; never re-create one.
--
-- KEYS[1]  lease key; its value is the owner
-- KEYS[2]  revoked mark of the lease (see revoke.lua)
-- KEYS[3]  state record of the lease (read only when revoked)
-- ARGV[1]  owner
-- ARGV[2]  ttl in milliseconds (the server's clock counts it)
--
-- Returns 1 when the lease was extended, 0 when owner holds no live lease,
-- {reason} when owner's tenure was revoked (nothing is extended).
if redis.call('GET', KEYS[2]) == ARGV[1] then
  return {redis.call('HGET', KEYS[3], 'r')}
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
