-- owner.lua: read the holder of a lease.
--
-- KEYS[1]  lease key; its value is the owner
--
-- Returns the owner of the live lease, or false (nil) when there is none. It
-- is a script rather than a plain GET so that it is always served by the
-- primary, like every other lease operation, even on a Cluster client that
-- routes read-only commands to replicas.
return redis.call('GET', KEYS[1])
