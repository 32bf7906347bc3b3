-- delete_drained.lua: delete a stream nobody still needs, or ack entries
-- and set the stream to expire when that leaves it drained.
--
-- KEYS[1]  stream
-- ARGV[1]  the one consumer group allowed on it
-- ARGV[2]  absent: delete the stream when drained (DeleteTopicIfDrained);
--          else an expiry in milliseconds to set on it instead
--          (pubsub.ExpireWhenDrained, the acker's writes)
-- ARGV[3…] with ARGV[2]: entry ids of ARGV[1] to XACK first
--
-- Drained: ARGV[1] is the stream's only group and that group was given
-- every entry (no entry is left after its last delivered id: the last
-- generated id may be above it when the newest entries were deleted with
-- XDEL) and acked them all (nothing pending), or the stream has no entry and
-- no group. Without ARGV[2] it deletes KEYS[1] (its entries and groups) and
-- returns 1 when drained, and returns 1 also when there is no stream;
-- otherwise it changes nothing and returns 0. With ARGV[2] it returns what
-- the XACK returned (a NOGROUP error when the group is gone, as XACK's),
-- after setting the expiry when drained. publish_for.lua removes the expiry
-- in the same step as its XADD.
local function field(list, name)
  for i = 1, #list, 2 do
    if list[i] == name then
      return list[i + 1]
    end
  end
end
-- drained reports whether the existing stream KEYS[1] is drained.
local function drained()
  local groups = redis.call('XINFO', 'GROUPS', KEYS[1])
  if #groups == 0 then
    return redis.call('XLEN', KEYS[1]) == 0
  end
  for _, g in ipairs(groups) do
    if field(g, 'name') ~= ARGV[1] or field(g, 'pending') ~= 0 then
      return false
    end
    local after = redis.call('XRANGE', KEYS[1], '(' .. field(g, 'last-delivered-id'), '+', 'COUNT', 1)
    if #after ~= 0 then
      return false
    end
  end
  return true
end
if ARGV[2] then
  -- XACK in chunks: unpack of more than about 8000 values overflows Lua's
  -- stack ("too many results to unpack"), and the acker sends every ack
  -- of a stream queued during a write in one call
  -- (TestExpireWhenDrainedLargeAckBatch).
  local acked = 0
  for i = 3, #ARGV, 1000 do
    acked = acked + redis.call('XACK', KEYS[1], ARGV[1], unpack(ARGV, i, math.min(i + 999, #ARGV)))
  end
  if redis.call('EXISTS', KEYS[1]) == 1 and drained() then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
  end
  return acked
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 1
end
if not drained() then
  return 0
end
redis.call('DEL', KEYS[1])
return 1
