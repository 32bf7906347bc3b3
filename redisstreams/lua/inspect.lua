-- inspect.lua: read a lease's value and the time left on it, atomically.
--
-- KEYS[1]  lease key; its value is "<token>:<owner>"
--
-- Returns {value, pttl} for a live lease (pttl in milliseconds, -1 when the
-- key has no expiry), or false (nil) when there is none.
local v = redis.call('GET', KEYS[1])
if not v then
  return false
end
return {v, redis.call('PTTL', KEYS[1])}
