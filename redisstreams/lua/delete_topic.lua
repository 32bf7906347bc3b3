-- delete_topic.lua: delete a stream so that a stream created later under
-- the same key numbers its entries above every entry it had.
--
-- KEYS[1]  stream
-- ARGV[1]  "1" on the first call of a deletion, "0" on the next ones
--
-- A stream created after a DEL numbers its entries from the server's
-- current millisecond: within the millisecond of the deleted stream's last
-- entry, at or below ids that fan-out readers already passed, which would
-- skip them. So the key is deleted only once the server's clock is past
-- that millisecond. Before that, the first call empties the stream and
-- destroys its groups, keeping the key (an empty stream keeps its last id,
-- so entries added meanwhile are numbered above it), and returns how many
-- milliseconds to wait before calling again with "0" (more than one when the
-- server's clock is behind the stream's ids). A later call deletes only a
-- stream still empty and without groups (one that was published to or
-- subscribed to meanwhile lives on). It returns 0 once nothing is left to
-- do.
--
-- The reply is {wait, last}: wait as above, and last the id of the stream's
-- last entry as the call found it ('' when there was no stream), so that
-- the caller knows which entries the deletion took.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {0, ''}
end
local info = redis.call('XINFO', 'STREAM', KEYS[1])
local last
for i = 1, #info, 2 do
  if info[i] == 'last-generated-id' then
    last = info[i + 1]
  end
end
local ms = tonumber(string.match(last or '0-0', '^(%d+)')) or 0
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if ARGV[1] ~= '1' then
  if redis.call('XLEN', KEYS[1]) ~= 0 or #redis.call('XINFO', 'GROUPS', KEYS[1]) ~= 0 then
    return {0, last or ''}
  end
end
if now > ms then
  redis.call('DEL', KEYS[1])
  return {0, last or ''}
end
if ARGV[1] == '1' then
  local groups = redis.call('XINFO', 'GROUPS', KEYS[1])
  for _, g in ipairs(groups) do
    for i = 1, #g, 2 do
      if g[i] == 'name' then
        redis.call('XGROUP', 'DESTROY', KEYS[1], g[i + 1])
      end
    end
  end
  redis.call('XTRIM', KEYS[1], 'MAXLEN', 0)
end
return {ms - now + 1, last or ''}
