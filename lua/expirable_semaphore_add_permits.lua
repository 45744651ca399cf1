-- expirable_semaphore_add_permits: add (or remove, with a negative count) permits to the pool.
-- (Prefixed with expirable_semaphore_prelude.lua.)
--
-- KEYS[1]  permits
-- KEYS[2]  deadlines
-- ARGV[1]  permits to add (any integer)
-- ARGV[2]  channel to publish on
--
-- Returns the number of available permits afterwards (expired permits reclaimed first).

reclaim(KEYS[1], KEYS[2], now_ms(), ARGV[2])
local available = redis.call('INCRBY', KEYS[1], ARGV[1])
if tonumber(ARGV[1]) > 0 then
    redis.call('PUBLISH', ARGV[2], ARGV[1])
end
return available
