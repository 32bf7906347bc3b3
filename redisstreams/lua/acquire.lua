-- acquire.lua: take a lease, or refresh it when the caller already holds it.
--
-- KEYS[1]  lease key; its value is "<token>:<owner>", with the lease's expiry
-- KEYS[2]  fencing counter of the lease (same hash slot; no TTL; never deleted)
-- ARGV[1]  owner
-- ARGV[2]  ttl in milliseconds (the server's clock counts it)
--
-- Returns the token (an integer > 0) when the caller holds the lease now, for
-- ARGV[2] milliseconds (a new tenure with a new token from the counter, or a
-- refresh keeping the token), or {holder, token, pttl} when another owner
-- holds it. The hot path replies with one integer, so callers parse little.
local v = redis.call('GET', KEYS[1])
if v then
  local i = string.find(v, ':', 1, true)
  local tok, holder = 0, v
  if i then
    tok = tonumber(string.sub(v, 1, i - 1)) or 0
    holder = string.sub(v, i + 1)
  end
  if holder == ARGV[1] then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return tok
  end
  return {holder, tok, redis.call('PTTL', KEYS[1])}
end
local tok = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], string.format('%d', tok) .. ':' .. ARGV[1], 'PX', ARGV[2])
return tok
