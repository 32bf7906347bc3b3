-- renew.lua: extend a live lease the caller holds; never re-create one.
--
-- KEYS[1]  lease key; its value is the owner
-- KEYS[2]  revoked mark of the lease (see revoke.lua)
-- KEYS[3]  state record of the lease (read only when revoked)
-- KEYS[4]  fencing counter of the lease (see acquire.lua): its expiry is
--          pushed back when it would come less than ARGV[3]/2 after the
--          renewed lease's, so it always outlives the lease
-- ARGV[1]  owner
-- ARGV[2]  ttl in milliseconds (the server's clock counts it)
-- ARGV[3]  fence idle time in milliseconds
--
-- Returns 1 when the lease was extended, 0 when owner holds no live lease,
-- {reason} when owner's tenure was revoked (nothing is extended).
if redis.call('GET', KEYS[2]) == ARGV[1] then
  return {redis.call('HGET', KEYS[3], 'r')}
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  if redis.call('PTTL', KEYS[4]) < ARGV[2] + ARGV[3] / 2 then
    redis.call('PEXPIRE', KEYS[4], ARGV[2] + ARGV[3])
  end
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
