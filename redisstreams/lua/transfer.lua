-- transfer.lua: hand a lease from one owner to another in one atomic step.
--
-- KEYS[1]  lease key; its value is the owner
-- KEYS[2]  fencing counter of the lease (same hash slot; no TTL; never deleted)
-- ARGV[1]  fromOwner
-- ARGV[2]  toOwner
-- ARGV[3]  ttl in milliseconds (the server's clock counts it)
--
-- Returns the new owner's token (> 0) when fromOwner held the lease, else 0.
-- The lease key is overwritten, never deleted, so it is never free between
-- the two owners.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
local tok = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return tok
