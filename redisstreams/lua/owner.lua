-- owner.lua: read the holder of a lease.
--
-- KEYS[1]  lease key; its value is "<token>:<owner>"
--
-- Returns the owner of the live lease, or false (nil) when there is none.
local v = redis.call('GET', KEYS[1])
if not v then
  return false
end
local i = string.find(v, ':', 1, true)
if i then
  return string.sub(v, i + 1)
end
return v
