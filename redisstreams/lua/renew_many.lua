-- renew_many.lua: renew.lua for many leases in one call.
--
-- KEYS[1..n]      lease keys; each value is the owner (on a Cluster, all in
--                 one hash slot)
-- KEYS[n+1..2n]   revoked mark of each lease (see revoke.lua)
-- KEYS[2n+1..3n]  fencing counter of each lease (see renew.lua)
-- ARGV[1..n]      owner of each key
-- ARGV[n+1..2n]   ttl of each key, in milliseconds (the server's clock)
-- ARGV[2n+1]      fence idle time in milliseconds
--
-- Returns a string of n bytes, one per key in order: '1' when that key's live
-- lease was held by its owner and extended, 'r' when the owner's tenure was
-- revoked (not extended), '0' when not (no live lease, or another owner's).
-- An expired lease is never re-created. Two MGETs read every owner and every
-- revoked mark (time stands still while a script runs, so no lease expires
-- between the read and its PEXPIRE); n stays well under Lua's unpack limit.
local n = #KEYS / 3
local idle = tonumber(ARGV[2 * n + 1])
local owners = redis.call('MGET', unpack(KEYS, 1, n))
local revoked = redis.call('MGET', unpack(KEYS, n + 1, 2 * n))
local out = {}
for i = 1, n do
  if revoked[i] == ARGV[i] then
    out[i] = 'r'
  elseif owners[i] == ARGV[i] then
    redis.call('PEXPIRE', KEYS[i], ARGV[n + i])
    if redis.call('PTTL', KEYS[2 * n + i]) < ARGV[n + i] + idle / 2 then
      redis.call('PEXPIRE', KEYS[2 * n + i], ARGV[n + i] + idle)
    end
    out[i] = '1'
  else
    out[i] = '0'
  end
end
return table.concat(out)
