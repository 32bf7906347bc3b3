-- release.lua: delete a lease only when the caller holds it.
--
-- KEYS[1]  lease key; its value is the owner
-- KEYS[2]  state record of the lease (see revoke.lua)
-- KEYS[3]  fencing counter of the lease (see acquire.lua): its value is the
--          live lease's token
-- ARGV[1]  owner
-- ARGV[2]  status window in milliseconds
-- ARGV[3]  the token of the tenure to release, or '' for any tenure of owner
--          (a release the network delivers late then leaves a later tenure
--          of the same owner alone)
--
-- Returns 1 when the lease was deleted, 0 when owner did not hold it (in that
-- tenure). The fencing counter is left alone, so the next tenure gets a
-- higher token. The state record notes the release and expires after the
-- window.
if redis.call('GET', KEYS[1]) == ARGV[1] and (ARGV[3] == '' or redis.call('GET', KEYS[3]) == ARGV[3]) then
  redis.call('DEL', KEYS[1])
  redis.call('HSET', KEYS[2], 'o', ARGV[1], 'e', '1')
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
  return 1
end
return 0
