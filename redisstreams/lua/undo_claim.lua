-- undo_claim.lua: put back entries a claim took, as they were before it,
-- only those still pending on the claimer.
--
-- KEYS[1]  stream
-- ARGV[1]  group
-- ARGV[2]  consumer (the claimer's)
-- ARGV[3], ARGV[4], ARGV[5], ARGV[6], ...  quadruples of entry id, the
--          consumer it was pending on, its idle time in ms and its delivery
--          count, as XPENDING reported them before the claim
--
-- For each entry still pending on the claimer, it gives the entry back to
-- its earlier consumer with its earlier idle time and delivery count
-- (XCLAIM with IDLE and RETRYCOUNT); an entry another member claimed
-- meanwhile is left alone. Returns the number of entries put back.
local n = 0
for i = 3, #ARGV, 4 do
  local id = ARGV[i]
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], id, id, 1)
  if #p > 0 and p[1][2] == ARGV[2] then
    redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[i + 1], 0, id, 'IDLE', ARGV[i + 2], 'RETRYCOUNT', ARGV[i + 3], 'JUSTID')
    n = n + 1
  end
end
return n
