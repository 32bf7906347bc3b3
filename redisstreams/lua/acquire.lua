-- acquire.lua: take a lease, or refresh it when the caller already holds it.
--
-- KEYS[1]  lease key; its value is the owner, its expiry the lease's
-- KEYS[2]  fencing counter of the lease (same hash slot); its value is the
--          token of the key's latest tenure, which is the live lease's token,
--          since only a new tenure raises it; it expires ARGV[4] ms after the
--          lease could last (renewals push that back), and a tenure after it
--          expired takes the server's clock in microseconds as its token, so
--          tokens keep increasing without keeping the counter forever
-- KEYS[3]  state record of the lease (see revoke.lua)
-- KEYS[4]  revoked mark of the lease (see revoke.lua)
-- ARGV[1]  owner
-- ARGV[2]  ttl in milliseconds (the server's clock counts it)
-- ARGV[3]  status window in milliseconds
-- ARGV[4]  fence idle time in milliseconds (Options.FenceIdle)
--
-- Returns the token (an integer > 0) when the caller holds the lease now, for
-- ARGV[2] milliseconds (a new tenure with a new token from the counter, or a
-- refresh keeping the token), {holder, token, pttl} when another owner holds
-- it, or {reason} when the caller holds it and it was revoked (no refresh).
-- A free key: SET NX GET both tests and takes it; the new tenure starts a
-- fresh state record (p and pn, the owner and call a transfer came from,
-- empty: see transfer.lua) and clears the revoked mark.
local v = redis.call('SET', KEYS[1], ARGV[1], 'NX', 'GET', 'PX', ARGV[2])
if not v then
  local t = redis.call('TIME')
  local tok = math.max((tonumber(redis.call('GET', KEYS[2])) or 0) + 1, tonumber(t[1]) * 1000000 + tonumber(t[2]))
  redis.call('SET', KEYS[2], string.format('%d', tok), 'PX', ARGV[2] + ARGV[4])
  redis.call('HSET', KEYS[3], 'o', ARGV[1], 't', tok, 's', '', 'r', '', 'f', '', 'e', '', 'p', '', 'pn', '')
  redis.call('PEXPIRE', KEYS[3], ARGV[2] + ARGV[3])
  redis.call('DEL', KEYS[4])
  return tok
end
if v == ARGV[1] then
  if redis.call('GET', KEYS[4]) == v then
    return {redis.call('HGET', KEYS[3], 'r')}
  end
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  if redis.call('PTTL', KEYS[2]) < ARGV[2] + ARGV[4] / 2 then
    redis.call('PEXPIRE', KEYS[2], ARGV[2] + ARGV[4])
  end
  return tonumber(redis.call('GET', KEYS[2])) or 0
end
return {v, tonumber(redis.call('GET', KEYS[2])) or 0, redis.call('PTTL', KEYS[1])}
