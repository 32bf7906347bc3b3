-- transfer.lua: hand a lease from one owner to another in one atomic step.
--
-- KEYS[1]  lease key; its value is the owner
-- KEYS[2]  fencing counter of the lease (same hash slot; no TTL; never deleted)
-- KEYS[3]  state record of the lease (same hash slot; see revoke.lua)
-- ARGV[1]  fromOwner
-- ARGV[2]  toOwner
-- ARGV[3]  ttl in milliseconds (the server's clock counts it)
-- ARGV[4]  status window in milliseconds
--
-- Returns the new owner's token (> 0) when fromOwner held the lease, else 0;
-- {reason} when fromOwner's tenure was revoked (nothing changes). The lease
-- key is overwritten, never deleted, so it is never free between the two
-- owners.
local m = redis.call('HMGET', KEYS[3], 'o', 's', 'r')
if m[1] == ARGV[1] and m[2] == 'revoked' then
  return {m[3]}
end
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
local tok = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
redis.call('DEL', KEYS[3])
redis.call('HSET', KEYS[3], 'o', ARGV[2], 't', tok)
redis.call('PEXPIRE', KEYS[3], ARGV[3] + ARGV[4])
return tok
