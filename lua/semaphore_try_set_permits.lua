-- semaphore_try_set_permits: initialise a semaphore's permits, only if it has none yet.
--
-- KEYS[1]  permits: the number of available permits (may be negative)
-- ARGV[1]  permits to start with (>= 0)
-- ARGV[2]  channel to publish on
--
-- Returns 1 if the semaphore was initialised, 0 if it already existed (nothing changed);
-- WRONGTYPE if the key holds anything but a count.

if redis.call('SET', KEYS[1], ARGV[1], 'NX') then
    if tonumber(ARGV[1]) > 0 then
        redis.call('PUBLISH', ARGV[2], ARGV[1])
    end
    return 1
end
if not tonumber(redis.call('GET', KEYS[1])) then
    return redis.error_reply('WRONGTYPE the permits key holds no count')
end
return 0
