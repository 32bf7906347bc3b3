-- create_group.lua: create a consumer group, as XGROUP CREATE ... MKSTREAM,
-- and take back a drained stream's expiry.
--
-- KEYS[1]  stream
-- ARGV[1]  group
-- ARGV[2]  the id the group starts at
-- ARGV[3]  Options.StreamIdleTTL in milliseconds, 0 when none
-- ARGV[4]  optional: pubsub.ExpireWhenDrained's expiry in milliseconds, 0
--          when none: set on a stream this call creates (MKSTREAM: empty,
--          with only ARGV[1], so drained, as delete_drained.lua sets it;
--          TestExpireWhenDrainedNewStreamExpires)
--
-- Returns XGROUP CREATE's reply (a BUSYGROUP error when the group exists:
-- then it changes nothing). When it created the group on a stream with an
-- expiry, it removes the expiry, or with ARGV[3] positive sets the idle
-- one, under the conditions below: the expiry may be one delete_drained.lua set when another group
-- drained the stream as its only group (pubsub.ExpireWhenDrained), and the
-- new group may be given entries the stream retains
-- (TestExpireWhenDrainedSecondGroupKeeps).
-- The expiry is taken back only when it may be a drained one: before the
-- creation, the stream had one group, with nothing pending
-- (delete_drained.lua sets an expiry only on a stream so drained; entries a
-- Publish without a group added since are not pending until read, and a
-- read takes the expiry back: read.lua). Any other expiry (one of
-- Options.StreamIdleTTL, set by a publisher in another process) is left
-- alone: a PERSIST kept that stream for ever
-- (TestStreamIdleTTLKeptByNewGroup).
local function field(list, name)
  for i = 1, #list, 2 do
    if list[i] == name then
      return list[i + 1]
    end
  end
end
local function drainedByOne()
  if redis.call('EXISTS', KEYS[1]) == 0 then
    return false
  end
  local groups = redis.call('XINFO', 'GROUPS', KEYS[1])
  return #groups == 1 and field(groups[1], 'pending') == 0
end
local created = redis.call('EXISTS', KEYS[1]) == 0
local takeBack = not created and redis.call('PTTL', KEYS[1]) > 0 and drainedByOne()
local ok = redis.pcall('XGROUP', 'CREATE', KEYS[1], ARGV[1], ARGV[2], 'MKSTREAM')
if type(ok) == 'table' and ok.err then
  return ok
end
if created and ARGV[4] and tonumber(ARGV[4]) > 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
elseif takeBack then
  if tonumber(ARGV[3]) > 0 then
    redis.call('PEXPIRE', KEYS[1], ARGV[3])
  else
    redis.call('PERSIST', KEYS[1])
  end
end
return ok
