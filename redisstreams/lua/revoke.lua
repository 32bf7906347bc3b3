-- revoke.lua: revoke the live lease on a key.
--
-- KEYS[1]  lease key; its value is the owner
-- KEYS[2]  fencing counter of the lease
-- KEYS[3]  state record of the lease (same hash slot), a hash: o = holder of
--          the latest tenure, t = its token, s = 'revoked' or 'released'
--          (absent while the lease is live and not revoked), r = revoke
--          reason, f = '1' for a forced revoke. acquire.lua and
--          transfer.lua rewrite it for each new tenure; renew extends it; it
--          expires a status window after the lease ended.
-- ARGV[1]  reason
-- ARGV[2]  '1' to force (free the key at once), '0' otherwise
-- ARGV[3]  status window in milliseconds
--
-- Returns 1 when the lease is revoked (by this call or earlier; the first
-- reason stays), 0 when the key has no live lease. Without force the lease
-- key is left alone: its holder keeps it until it releases it or it expires,
-- and its renew, refresh and transfer scripts answer {reason} from now on.
local v = redis.call('GET', KEYS[1])
if not v then
  return 0
end
local m = redis.call('HMGET', KEYS[3], 'o', 's')
if m[1] ~= v then
  -- No record of this tenure (a lease older than state records): start one.
  redis.call('DEL', KEYS[3])
  redis.call('HSET', KEYS[3], 'o', v, 't', tonumber(redis.call('GET', KEYS[2])) or 0)
end
if m[1] ~= v or m[2] ~= 'revoked' then
  redis.call('HSET', KEYS[3], 's', 'revoked', 'r', ARGV[1])
end
if ARGV[2] == '1' then
  redis.call('HSET', KEYS[3], 'f', '1')
  redis.call('DEL', KEYS[1])
  redis.call('PEXPIRE', KEYS[3], ARGV[3])
  return 1
end
local ms = redis.call('PTTL', KEYS[1])
if ms < 0 then
  ms = 0
end
redis.call('PEXPIRE', KEYS[3], ms + ARGV[3])
return 1
