-- trim.lua: remove a stream's oldest entries beyond its retention, but only
-- entries that every consumer group of the stream has acked.
--
-- KEYS[1]  stream key
-- ARGV[1]  retention: the newest entries to keep at least
-- ARGV[2]  the most entries one call removes
--
-- An entry may go when it is older than the newest ARGV[1] entries and, for
-- every group, it is at or below the group's last delivered id and below the
-- group's oldest pending (unacked) entry. Returns the number removed.
local key = KEYS[1]
local keep = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
if redis.call('EXISTS', key) == 0 then
  return 0
end
local len = redis.call('XLEN', key)
local over = len - keep
if over <= 0 then
  return 0
end
if over > limit then
  over = limit
end

-- Stream ids "ms-seq" compared as two decimal numbers of any length.
local function numless(a, b)
  if #a ~= #b then
    return #a < #b
  end
  return a < b
end
local function less(x, y)
  local dx = string.find(x, '-', 1, true)
  local dy = string.find(y, '-', 1, true)
  local xm, xs = string.sub(x, 1, dx - 1), string.sub(x, dx + 1)
  local ym, ys = string.sub(y, 1, dy - 1), string.sub(y, dy + 1)
  if xm ~= ym then
    return numless(xm, ym)
  end
  return numless(xs, ys)
end

-- bound: entries up to it may go (inclusive), or only those below it.
local bound, inclusive = nil, false
for _, g in ipairs(redis.call('XINFO', 'GROUPS', key)) do
  local name, pending, last
  for i = 1, #g, 2 do
    local f = g[i]
    if f == 'name' then
      name = g[i + 1]
    elseif f == 'pending' then
      pending = g[i + 1]
    elseif f == 'last-delivered-id' then
      last = g[i + 1]
    end
  end
  local id, incl = last, true
  if pending > 0 then
    -- the oldest pending entry (always at or below the last delivered)
    id, incl = redis.call('XPENDING', key, name)[2], false
  end
  if bound == nil or less(id, bound) or (id == bound and not incl) then
    bound, inclusive = id, incl
  end
end

local stop = '+'
if bound ~= nil then
  stop = bound
end
local entries = redis.call('XRANGE', key, '-', stop, 'COUNT', over)
local n = #entries
if n > 0 and bound ~= nil and not inclusive and entries[n][1] == bound then
  n = n - 1
end
if n <= 0 then
  return 0
end
return redis.call('XTRIM', key, 'MAXLEN', len - n)
