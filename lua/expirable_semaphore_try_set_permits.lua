-- expirable_semaphore_try_set_permits: initialise the pool, only if it does not exist yet.
-- (Prefixed with publish_prelude.lua, wake_prelude.lua, semaphore_wake_prelude.lua and
-- expirable_semaphore_prelude.lua.)
--
-- KEYS[1]  permits
-- KEYS[2]  deadlines
-- KEYS[3]  waiters (see wake_prelude.lua)
-- ARGV[1]  permits to start with (>= 0)
--
-- Returns 1 if initialised (waking as many waiting clients as it has permits), 0 if the
-- semaphore already existed (nothing changed); WRONGTYPE if either key holds foreign data.

pool(KEYS[1])
redis.call('ZCARD', KEYS[2])
if redis.call('EXISTS', KEYS[1], KEYS[2]) > 0 then
    return 0
end
redis.call('SET', KEYS[1], ARGV[1])
wake_waiters(KEYS[3], ARGV[1], ARGV[1])
return 1
