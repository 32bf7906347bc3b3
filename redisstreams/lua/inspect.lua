-- inspect.lua: read a lease's owner, token and the time left on it,
-- atomically.
--
-- KEYS[1]  lease key; its value is the owner
-- KEYS[2]  fencing counter of the lease; its value is the live lease's token
--
-- Returns {owner, token, pttl} for a live lease (pttl in milliseconds, -1
-- when the key has no expiry), or false (nil) when there is none.
local v = redis.call('GET', KEYS[1])
if not v then
  return false
end
return {v, tonumber(redis.call('GET', KEYS[2])) or 0, redis.call('PTTL', KEYS[1])}
