-- renew.lua: extend a live lease the caller holds; never re-create one.
--
-- KEYS[1]  lease key; its value is "<token>:<owner>"
-- ARGV[1]  owner
-- ARGV[2]  ttl in milliseconds (the server's clock counts it)
--
-- Returns 1 when the lease was extended, 0 when owner holds no live lease.
local v = redis.call('GET', KEYS[1])
if not v then
  return 0
end
local i = string.find(v, ':', 1, true)
if i and string.sub(v, i + 1) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
