-- release.lua: delete a lease only when the caller holds it.
--
-- KEYS[1]  lease key; its value is "<token>:<owner>"
-- ARGV[1]  owner
--
-- Returns 1 when the lease was deleted, 0 when owner did not hold it. The
-- fencing counter is left alone, so the next tenure gets a higher token.
local v = redis.call('GET', KEYS[1])
if not v then
  return 0
end
local i = string.find(v, ':', 1, true)
if i and string.sub(v, i + 1) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
