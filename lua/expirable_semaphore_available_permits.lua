-- expirable_semaphore_available_permits: the number of available permits, counting those whose
-- lease ended as available. (Prefixed with clock_prelude.lua and
-- expirable_semaphore_prelude.lua.)
--
-- KEYS[1]  permits
-- KEYS[2]  deadlines
--
-- Returns the count; 0 for a semaphore that does not exist. Read-only: expired permits are
-- counted here and reclaimed by the next script that writes.

local expired = redis.call('ZCOUNT', KEYS[2], '-inf', now_ms())
return pool(KEYS[1]) + expired
