-- release.lua: delete a lease only when the caller holds it.
--
-- KEYS[1]  lease key; its value is the owner
-- ARGV[1]  owner
--
-- Returns 1 when the lease was deleted, 0 when owner did not hold it. The
-- fencing counter is left alone, so the next tenure gets a higher token.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
