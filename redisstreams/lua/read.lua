-- read.lua: a group read (XREADGROUP ... STREAMS key >, without BLOCK) that
-- runs only while its subscription reads, and only before every later read
-- of the same consumer.
--
-- KEYS[1]  stream
-- KEYS[2]  read guard of the consumer (same hash slot): the sequence number
--          of the consumer's latest read that ran. The subscription creates
--          it as it starts and deletes it as it ends; it expires ARGV[5] ms
--          after the latest read.
-- ARGV[1]  group
-- ARGV[2]  consumer
-- ARGV[3]  count, or "count/first": at most count entries, the first
--          XREADGROUP of them reading first (default 1); the read also stops
--          at a budget of bytes, below
-- ARGV[4]  this read's sequence number, above every earlier read's
-- ARGV[5]  the guard's lifetime in milliseconds
-- ARGV[6]  optional: "tail" to return the stream's last entry id with the
--          reply (a ReadOnDemand subscription: when the read returned that
--          entry, nothing a Kick covered is left unread)
-- ARGV[7]  optional: Options.StreamIdleTTL in milliseconds (0 when none),
--          to take back the stream's expiry when the read returns entries
--          (pubsub.ExpireWhenDrained: the entries of a publisher that did
--          not are not deleted with the stream while they are pending): an
--          expiry is removed, or with a positive ARGV[7] set to it, as
--          create_group.lua does
--
-- Returns XREADGROUP's reply (nil when nothing is new) or its error (NOGROUP);
-- with "tail", {reply, id of the stream's last entry (nil when empty)}, read
-- in the same atomic step, or XREADGROUP's error.
-- Reads nothing and returns an error when the guard is missing (NOGUARD: the
-- subscription ended, or was idle longer than the guard's lifetime) or holds
-- this or a later sequence number (STALEREAD). So a read the network delays
-- past its client's timeout, and delivers after the subscription's later
-- reads or after its end, delivers nothing that nobody would see.
local cur = redis.call('GET', KEYS[2])
if not cur then
  return redis.error_reply('NOGUARD read guard missing')
end
if tonumber(cur) >= tonumber(ARGV[4]) then
  return redis.error_reply('STALEREAD a later read of this consumer ran')
end
redis.call('SET', KEYS[2], ARGV[4], 'PX', ARGV[5])
-- Up to count entries, but no more than about 1 MiB (fields and values,
-- the budget readBudget in group.go): XREADGROUP COUNT first (the caller's
-- guess from its previous read's entry sizes), then chunks that double,
-- each no larger than what the budget has room for at the biggest entry
-- seen, until the count, the budget or the stream's end. A reply of
-- entries of 1 MiB at COUNT 256 went through Lua for 13.4s, during which
-- the server answered no client (review h72).
local budget = 1048576
local want, chunk = string.match(ARGV[3], '^(%d+)/(%d+)$')
if want then
  want, chunk = tonumber(want), math.max(1, tonumber(chunk))
else
  want, chunk = tonumber(ARGV[3]), 1
end
local r
local entries, bytes, biggest = {}, 0, 0
while #entries < want and bytes < budget do
  local c = math.min(chunk, want - #entries)
  if biggest > 0 then
    c = math.max(1, math.min(c, math.floor((budget - bytes) / biggest)))
  end
  local x = redis.pcall('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', c, 'STREAMS', KEYS[1], '>')
  if type(x) == 'table' and x.err then
    if #entries == 0 then
      r = x
    end
    break
  end
  if not x then
    break
  end
  local got = x[1][2]
  for _, e in ipairs(got) do
    entries[#entries + 1] = e
    local size = 0
    for _, f in ipairs(e[2]) do
      size = size + #f
    end
    bytes = bytes + size
    if size > biggest then
      biggest = size
    end
  end
  if #got < c then
    break
  end
  chunk = chunk * 2
end
if r == nil then
  if #entries > 0 then
    r = {{KEYS[1], entries}}
  else
    r = false
  end
end
if ARGV[7] and type(r) == 'table' and not r.err and redis.call('PTTL', KEYS[1]) > 0 then
  if tonumber(ARGV[7]) > 0 then
    redis.call('PEXPIRE', KEYS[1], ARGV[7])
  else
    redis.call('PERSIST', KEYS[1])
  end
end
if ARGV[6] ~= 'tail' or (type(r) == 'table' and r.err) then
  return r
end
local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
return {r, last[1] and last[1][1] or false}
