-- release.lua: delete a lease only when the caller holds it.
--
-- KEYS[1]  lease key; its value is the owner
-- KEYS[2]  state record of the lease (see revoke.lua)
-- ARGV[1]  owner
-- ARGV[2]  status window in milliseconds
--
-- Returns 1 when the lease was deleted, 0 when owner did not hold it. The
-- fencing counter is left alone, so the next tenure gets a higher token. The
-- state record notes the release and expires after the window.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('HSET', KEYS[2], 'o', ARGV[1], 'e', '1')
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
  return 1
end
return 0
