-- expirable_semaphore_total_permits: how many permits the semaphore has in all, available or
-- leased out. (Prefixed with expirable_semaphore_prelude.lua.)
--
-- KEYS[1]  permits
-- KEYS[2]  deadlines
--
-- Returns {exists, total}: exists is 0 for a semaphore that does not exist (neither key), and
-- total the pool plus every lease, ended or not (an ended lease's permit comes back to the
-- pool when reclaimed, so it counts once either way). Read-only.

local leased = redis.call('ZCARD', KEYS[2])
local exists = redis.call('EXISTS', KEYS[1]) + math.min(leased, 1)
return {math.min(exists, 1), pool(KEYS[1]) + leased}
