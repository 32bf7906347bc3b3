-- create_group.lua: create a consumer group, as XGROUP CREATE ... MKSTREAM,
-- and take back a drained stream's expiry.
--
-- KEYS[1]  stream
-- ARGV[1]  group
-- ARGV[2]  the id the group starts at
-- ARGV[3]  Options.StreamIdleTTL in milliseconds, 0 when none
--
-- Returns XGROUP CREATE's reply (a BUSYGROUP error when the group exists:
-- then it changes nothing). When it created the group on a stream with an
-- expiry, it removes the expiry, or with ARGV[3] positive sets the idle
-- one: the expiry may be one delete_drained.lua set when another group
-- drained the stream as its only group (pubsub.ExpireWhenDrained), and the
-- new group may be given entries the stream retains
-- (TestExpireWhenDrainedSecondGroupKeeps).
local ok = redis.pcall('XGROUP', 'CREATE', KEYS[1], ARGV[1], ARGV[2], 'MKSTREAM')
if type(ok) == 'table' and ok.err then
  return ok
end
if redis.call('PTTL', KEYS[1]) > 0 then
  if tonumber(ARGV[3]) > 0 then
    redis.call('PEXPIRE', KEYS[1], ARGV[3])
  else
    redis.call('PERSIST', KEYS[1])
  end
end
return ok
