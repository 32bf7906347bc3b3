-- hand_back.lua: hand entries a stopping group member holds back to the
-- group, only those it still holds.
--
-- KEYS[1]  stream
-- KEYS[2]  optional: the group's hand-back notice (same hash slot)
-- ARGV[1]  group
-- ARGV[2]  consumer (the stopping member's)
-- ARGV[3]  idle time to set, ms (far in the past: claimable at once)
-- ARGV[4]  with KEYS[2] only: the notice's lifetime, ms; the notice's value
--          is ARGV[5]
-- then pairs of entry id and the delivery count to set (from ARGV[4], or
-- from ARGV[6] with KEYS[2])
--
-- For each entry still pending on the consumer, it sets the entry's idle
-- time and delivery count (XCLAIM to the same consumer with IDLE and
-- RETRYCOUNT); an entry another member claimed meanwhile (ClaimPending, an
-- ack-deadline take-over) is left alone. The check and the claim are one
-- step, whatever the clocks: a claim at min-idle could take an entry back
-- from a member that claimed it within the same millisecond. With KEYS[2],
-- when it handed anything back, it sets the notice in the same step (so a
-- member that takes the entries over and deletes the emptied consumer
-- always finds it: delete_consumer.lua). Returns the number of entries
-- handed back.
local first = 4
if #KEYS > 1 then
  first = 6
end
local n = 0
for i = first, #ARGV, 2 do
  local id = ARGV[i]
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], id, id, 1)
  if #p > 0 and p[1][2] == ARGV[2] then
    redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, id, 'IDLE', ARGV[3], 'RETRYCOUNT', ARGV[i + 1], 'JUSTID')
    n = n + 1
  end
end
if n > 0 and #KEYS > 1 then
  redis.call('SET', KEYS[2], ARGV[5], 'PX', ARGV[4])
end
return n
