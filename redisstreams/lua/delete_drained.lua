-- delete_drained.lua: delete a stream nobody still needs.
--
-- KEYS[1]  stream
-- ARGV[1]  the one consumer group allowed on it
--
-- Deletes KEYS[1] (its entries and groups) and returns 1 when ARGV[1] is its
-- only group and that group was given every entry (no entry is left after
-- its last delivered id: the last generated id may be above it when the
-- newest entries were deleted with XDEL) and acked them all (nothing
-- pending), or when the stream has no entry and no group; returns 1 also
-- when there is no stream. Otherwise it changes nothing and returns 0.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 1
end
local function field(list, name)
  for i = 1, #list, 2 do
    if list[i] == name then
      return list[i + 1]
    end
  end
end
local groups = redis.call('XINFO', 'GROUPS', KEYS[1])
if #groups == 0 then
  if redis.call('XLEN', KEYS[1]) ~= 0 then
    return 0
  end
else
  for _, g in ipairs(groups) do
    if field(g, 'name') ~= ARGV[1] or field(g, 'pending') ~= 0 then
      return 0
    end
    local after = redis.call('XRANGE', KEYS[1], '(' .. field(g, 'last-delivered-id'), '+', 'COUNT', 1)
    if #after ~= 0 then
      return 0
    end
  end
end
redis.call('DEL', KEYS[1])
return 1
