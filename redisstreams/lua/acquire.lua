-- acquire.lua: take a lease, or refresh it when the caller already holds it.
--
-- KEYS[1]  lease key; its value is the owner, its expiry the lease's
-- KEYS[2]  fencing counter of the lease (same hash slot; no TTL; never
--          deleted); its value is the token of the key's latest tenure, which
--          is the live lease's token, since only a new tenure increments it
-- ARGV[1]  owner
-- ARGV[2]  ttl in milliseconds (the server's clock counts it)
--
-- Returns the token (an integer > 0) when the caller holds the lease now, for
-- ARGV[2] milliseconds (a new tenure with a new token from the counter, or a
-- refresh keeping the token), or {holder, token, pttl} when another owner
-- holds it. A free key costs two calls: SET NX GET both tests and takes it.
local v = redis.call('SET', KEYS[1], ARGV[1], 'NX', 'GET', 'PX', ARGV[2])
if not v then
  return redis.call('INCR', KEYS[2])
end
if v == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return tonumber(redis.call('GET', KEYS[2])) or 0
end
return {v, tonumber(redis.call('GET', KEYS[2])) or 0, redis.call('PTTL', KEYS[1])}
