-- publish_for.lua: add an entry to a stream for a consumer group that may
-- not exist yet, in one atomic step (PublishFor).
--
-- KEYS[1]  stream
-- ARGV[1]  group
-- ARGV[2…] the entry's field/value pairs
--
-- Creates ARGV[1] on KEYS[1] at the stream's end ("$", with MKSTREAM) when
-- it is missing (an existing group keeps its position), then adds the entry,
-- so the group is given it. Nothing runs in between: a drained stream's
-- deletion (delete_drained.lua) cannot leave the entry in a new stream
-- without the group. It also removes any expiry of the stream (set by
-- delete_drained.lua when the group drained it: pubsub.ExpireWhenDrained),
-- so that the stream is not deleted with the entry unread (with
-- Options.StreamIdleTTL the publish's PEXPIRE, sent right after, sets the
-- idle expiry again). Returns the entry's id.
local ok = redis.pcall('XGROUP', 'CREATE', KEYS[1], ARGV[1], '$', 'MKSTREAM')
if type(ok) == 'table' and ok.err and not string.find(ok.err, 'BUSYGROUP', 1, true) then
  return ok
end
local id = redis.call('XADD', KEYS[1], '*', unpack(ARGV, 2))
redis.call('PERSIST', KEYS[1])
return id
