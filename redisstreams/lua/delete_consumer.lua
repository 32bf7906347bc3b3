-- delete_consumer.lua: delete a group's consumer when it holds nothing.
--
-- KEYS[1]  stream
-- KEYS[2]  optional: the group's hand-back notice (same hash slot)
-- ARGV[1]  group
-- ARGV[2]  consumer
-- ARGV[3]  with KEYS[2] only: an idle time, ms, that only entries handed
--          back and not yet taken over reach (hand_back.lua sets a year)
--
-- Deletes the consumer and returns 1 when it has no pending entry; returns
-- 0 and keeps it otherwise. The check and the deletion are one step: a read
-- of that consumer that runs late (one its subscription stopped waiting
-- for) either comes first, and its entries keep the consumer, or after,
-- and recreates it with them pending; it never runs in between, where
-- XGROUP DELCONSUMER would drop its entries from the group's pending list.
-- With KEYS[2], a notice of this consumer's hand-back (its value starts
-- with the consumer's name and a NUL byte) is deleted with it: what it told
-- of has been taken over, unless an entry of the group's is still handed
-- back and unclaimed (idle ARGV[3] or more: another consumer's hand-back,
-- which the notice, overwritten by this consumer's, stands for as well).
-- Errors (NOGROUP) are returned as errors.
local p = redis.call('XPENDING', KEYS[1], ARGV[1], '-', '+', 1, ARGV[2])
if #p > 0 then
  return 0
end
redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], ARGV[2])
if #KEYS > 1 then
  local v = redis.call('GET', KEYS[2])
  local head = ARGV[2] .. '\0'
  if v and string.sub(v, 1, #head) == head and
      #redis.call('XPENDING', KEYS[1], ARGV[1], 'IDLE', ARGV[3], '-', '+', 1) == 0 then
    redis.call('DEL', KEYS[2])
  end
end
return 1
