-- transfer.lua: hand a lease from one owner to another in one atomic step.
--
-- KEYS[1]  lease key; its value is the owner
-- KEYS[2]  fencing counter of the lease (same hash slot; see acquire.lua)
-- KEYS[3]  state record of the lease (see revoke.lua)
-- KEYS[4]  revoked mark of the lease (see revoke.lua)
-- ARGV[1]  fromOwner
-- ARGV[2]  toOwner
-- ARGV[3]  ttl in milliseconds (the server's clock counts it)
-- ARGV[4]  status window in milliseconds
-- ARGV[5]  fence idle time in milliseconds (see acquire.lua)
-- ARGV[6]  a random nonce of this call (a retry of the call carries it too)
--
-- Returns the new owner's token (> 0) when fromOwner held the lease, else 0;
-- {reason} when fromOwner's tenure was revoked (nothing changes). The lease
-- key is overwritten, never deleted, so it is never free between the two
-- owners; the new tenure starts a fresh state record, which names fromOwner
-- and the call's nonce (fields p and pn). The same call run again after it
-- ran (go-redis retries a command whose reply it lost, as when the server
-- stalled) finds toOwner holding the lease it got from fromOwner by this
-- call, and returns its token again: it is reported done, as it is, not
-- refused. Any other call from fromOwner is refused.
if redis.call('GET', KEYS[4]) == ARGV[1] then
  return {redis.call('HGET', KEYS[3], 'r')}
end
local cur = redis.call('GET', KEYS[1])
if cur ~= ARGV[1] then
  if cur == ARGV[2] and redis.call('HGET', KEYS[3], 'p') == ARGV[1] and redis.call('HGET', KEYS[3], 'pn') == ARGV[6] then
    -- A write (of the value it has) so that the retry propagates: a WAIT
    -- after it (LeaseSyncReplicas) then covers the transfer it repeats,
    -- also where a connection's WAIT counts from that connection's last
    -- write (the retry comes on a new connection), as Redis 7.2+ does.
    redis.call('HSET', KEYS[3], 'pn', ARGV[6])
    return tonumber(redis.call('HGET', KEYS[3], 't')) or 0
  end
  return 0
end
local t = redis.call('TIME')
local tok = math.max((tonumber(redis.call('GET', KEYS[2])) or 0) + 1, tonumber(t[1]) * 1000000 + tonumber(t[2]))
redis.call('SET', KEYS[2], string.format('%d', tok), 'PX', ARGV[3] + ARGV[5])
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
redis.call('HSET', KEYS[3], 'o', ARGV[2], 't', tok, 's', '', 'r', '', 'f', '', 'e', '', 'p', ARGV[1], 'pn', ARGV[6])
redis.call('PEXPIRE', KEYS[3], ARGV[3] + ARGV[4])
return tok
