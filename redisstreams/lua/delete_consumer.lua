-- delete_consumer.lua: delete a group's consumer when it holds nothing.
--
-- KEYS[1]  stream
-- ARGV[1]  group
-- ARGV[2]  consumer
--
-- Deletes the consumer and returns 1 when it has no pending entry; returns
-- 0 and keeps it otherwise. The check and the deletion are one step: a read
-- of that consumer that runs late (one its subscription stopped waiting
-- for) either comes first, and its entries keep the consumer, or after,
-- and recreates it with them pending; it never runs in between, where
-- XGROUP DELCONSUMER would drop its entries from the group's pending list.
-- Errors (NOGROUP) are returned as errors.
local p = redis.call('XPENDING', KEYS[1], ARGV[1], '-', '+', 1, ARGV[2])
if #p > 0 then
  return 0
end
redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], ARGV[2])
return 1
