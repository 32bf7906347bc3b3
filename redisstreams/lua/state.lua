-- state.lua: read the state of a lease key: the live lease, or what became
-- of the last one (see revoke.lua for the state record and revoked mark).
--
-- KEYS[1]  lease key; its value is the owner
-- KEYS[2]  fencing counter of the lease
-- KEYS[3]  state record of the lease (same hash slot)
-- KEYS[4]  revoked mark of the lease (same hash slot)
--
-- Returns {status, owner, token, pttl, reason, forced} with status one of
-- 'active', 'revoked', 'released', 'expired' (pttl 0 unless the lease is
-- live), or false (nil) when nothing is known of the key.
local v = redis.call('GET', KEYS[1])
local m = redis.call('HMGET', KEYS[3], 'o', 't', 's', 'r', 'f', 'e')
if v then
  local tok = tonumber(redis.call('GET', KEYS[2])) or 0
  local ms = redis.call('PTTL', KEYS[1])
  if redis.call('GET', KEYS[4]) == v then
    return {'revoked', v, tok, ms, m[4] or '', m[5] or ''}
  end
  return {'active', v, tok, ms, '', ''}
end
if not m[1] then
  return false
end
local st = 'expired'
if m[3] == 'revoked' then
  st = 'revoked'
elseif m[6] == '1' then
  st = 'released'
end
local reason = ''
if st == 'revoked' then
  reason = m[4] or ''
end
return {st, m[1], tonumber(m[2]) or 0, 0, reason, m[5] or ''}
