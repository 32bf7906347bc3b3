-- raise_guard.lua: set a read guard (see read.lua) to ARGV[1] unless it
-- holds that or more already, so that a copy of this call the network
-- delivers late never lowers it.
--
-- KEYS[1]  read guard
-- ARGV[1]  sequence number
-- ARGV[2]  the guard's lifetime in milliseconds
local cur = redis.call('GET', KEYS[1])
if cur and tonumber(cur) >= tonumber(ARGV[1]) then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
