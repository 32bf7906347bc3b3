-- renew.lua: extend a live lease the caller holds; never re-create one.
--
-- KEYS[1]  lease key; its value is the owner
-- ARGV[1]  owner
-- ARGV[2]  ttl in milliseconds (the server's clock counts it)
--
-- Returns 1 when the lease was extended, 0 when owner holds no live lease.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
