-- expirable_semaphore_add_permits: add (or remove, with a negative count) permits to the pool.
-- (Prefixed with publish_prelude.lua, clock_prelude.lua, wake_prelude.lua,
-- semaphore_wake_prelude.lua and expirable_semaphore_prelude.lua.)
--
-- KEYS[1]  permits
-- KEYS[2]  deadlines
-- KEYS[3]  waiters (see wake_prelude.lua)
-- ARGV[1]  permits to add (any integer)
--
-- Returns the number of available permits afterwards (expired permits reclaimed first).
-- Permits added or reclaimed wake as many waiting clients, as far as there are permits free.

local _, reclaimed = reclaim(KEYS[1], KEYS[2], now_ms())
local available = redis.call('INCRBY', KEYS[1], ARGV[1])
wake_waiters(KEYS[3], reclaimed + math.max(0, tonumber(ARGV[1])), available)
return available
