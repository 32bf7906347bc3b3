-- hand_back.lua: hand entries a stopping group member holds back to the
-- group, only those it still holds.
--
-- KEYS[1]  stream
-- ARGV[1]  group
-- ARGV[2]  consumer (the stopping member's)
-- ARGV[3]  idle time to set, ms (far in the past: claimable at once)
-- ARGV[4], ARGV[5], ...  pairs of entry id and the delivery count to set
--
-- For each entry still pending on the consumer, it sets the entry's idle
-- time and delivery count (XCLAIM to the same consumer with IDLE and
-- RETRYCOUNT); an entry another member claimed meanwhile (ClaimPending, an
-- ack-deadline take-over) is left alone. The check and the claim are one
-- step, whatever the clocks: a claim at min-idle could take an entry back
-- from a member that claimed it within the same millisecond. Returns the
-- number of entries handed back.
local n = 0
for i = 4, #ARGV, 2 do
  local id = ARGV[i]
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], id, id, 1)
  if #p > 0 and p[1][2] == ARGV[2] then
    redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, id, 'IDLE', ARGV[3], 'RETRYCOUNT', ARGV[i + 1], 'JUSTID')
    n = n + 1
  end
end
return n
