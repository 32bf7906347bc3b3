-- revoke.lua: revoke the live lease on a key.
--
-- KEYS[1]  lease key; its value is the owner
-- KEYS[2]  fencing counter of the lease
-- KEYS[3]  state record of the lease (same hash slot), a hash about the
--          key's latest tenure: o = holder, t = token, s = 'revoked' (else
--          empty), r = revoke reason, f = '1' for a forced revoke, e = '1'
--          once released. acquire.lua (of a free key) and transfer.lua
--          rewrite it for each new tenure and give it the lease's ttl plus
--          the status window; release and revoke set it to expire a status
--          window after the lease ended. Renewals do not touch it.
-- KEYS[4]  revoked mark of the lease (same hash slot), a string: the owner
--          whose tenure was revoked. Renew, refresh and transfer scripts
--          check it (renew_many.lua with one MGET); a new tenure deletes it.
-- KEYS[5]  this call's mark (same hash slot; its name ends with the call's
--          random nonce, which a retry of the call carries too): set by
--          every run that answers 1, expiring a status window after the
--          lease's end (or after now, for a forced revoke)
-- ARGV[1]  reason
-- ARGV[2]  '1' to force (free the key at once), '0' otherwise
-- ARGV[3]  status window in milliseconds
-- ARGV[4]  the token of the tenure to revoke, or '' (or absent) for whatever tenure
--          holds the key (the fencing counter's value is the live tenure's
--          token; a revoke that runs after the lease changed hands then
--          finds another token and answers 0, touching nothing)
--
-- Returns 1 when the lease is revoked (by this call or earlier; the first
-- reason stays), 0 when the key has no live lease (in the tenure of
-- ARGV[4]). Without force the lease
-- key is left alone: its holder keeps it until it releases it or it expires.
-- The same call run again after it answered 1 (go-redis sends a command
-- again when its reply was lost, and so do the lease calls while a Cluster
-- slot migrates) finds its mark and answers 1 again, touching nothing: a
-- revoke run twice would otherwise find no lease, or revoke the tenure of
-- an owner who took the key in between. Each call has a mark of its own, so
-- that other revoke calls in between cannot erase it.
if redis.call('EXISTS', KEYS[5]) == 1 then
  return 1
end
local v = redis.call('GET', KEYS[1])
if not v then
  return 0
end
if (ARGV[4] or '') ~= '' and redis.call('GET', KEYS[2]) ~= ARGV[4] then
  return 0
end
local ms = redis.call('PTTL', KEYS[1])
if ms < 0 then
  ms = 0
end
if redis.call('GET', KEYS[4]) ~= v then
  redis.call('HSET', KEYS[3], 'o', v, 't', tonumber(redis.call('GET', KEYS[2])) or 0, 's', 'revoked', 'r', ARGV[1])
end
if ARGV[2] == '1' then
  redis.call('HSET', KEYS[3], 'f', '1')
  redis.call('DEL', KEYS[1])
  ms = 0
end
redis.call('SET', KEYS[4], v, 'PX', ms + ARGV[3])
redis.call('SET', KEYS[5], '1', 'PX', ms + ARGV[3])
redis.call('PEXPIRE', KEYS[3], ms + ARGV[3])
return 1
