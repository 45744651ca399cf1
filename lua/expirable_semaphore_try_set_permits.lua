-- expirable_semaphore_try_set_permits: initialise the pool, only if it does not exist yet.
--
-- KEYS[1]  permits
-- KEYS[2]  deadlines
-- ARGV[1]  permits to start with (>= 0)
-- ARGV[2]  channel to publish on
--
-- Returns 1 if initialised, 0 if the semaphore already existed (nothing changed); WRONGTYPE
-- if either key holds foreign data.

pool(KEYS[1])
redis.call('ZCARD', KEYS[2])
if redis.call('EXISTS', KEYS[1], KEYS[2]) > 0 then
    return 0
end
redis.call('SET', KEYS[1], ARGV[1])
if tonumber(ARGV[1]) > 0 then
    redis.call('PUBLISH', ARGV[2], ARGV[1])
end
return 1
