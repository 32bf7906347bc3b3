-- renew.lua: extend a live lease the caller holds; never re-create one.
--
-- KEYS[1]  lease key; its value is the owner
-- KEYS[2]  state record of the lease (same hash slot; see revoke.lua)
-- ARGV[1]  owner
-- ARGV[2]  ttl in milliseconds (the server's clock counts it)
-- ARGV[3]  status window in milliseconds
--
-- Returns 1 when the lease was extended, 0 when owner holds no live lease,
-- {reason} when owner's tenure was revoked.
local m = redis.call('HMGET', KEYS[2], 'o', 's', 'r')
if m[1] == ARGV[1] and m[2] == 'revoked' then
  return {m[3]}
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[2], ARGV[2] + ARGV[3])
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
