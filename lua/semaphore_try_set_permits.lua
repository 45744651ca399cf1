-- semaphore_try_set_permits: initialise a semaphore's permits, only if it has none yet; this
-- starts a new generation. (Prefixed with publish_prelude.lua, wake_prelude.lua and
-- semaphore_wake_prelude.lua.)
--
-- KEYS[1]  permits: the number of available permits (may be negative)
-- KEYS[2]  generation: a unique id of this incarnation of the semaphore (see
--          semaphore_prelude.lua)
-- KEYS[3]  waiters (see wake_prelude.lua)
-- ARGV[1]  permits to start with (>= 0)
-- ARGV[2]  a new unique id, the generation if this creates the semaphore
--
-- Returns 1 if the semaphore was initialised (waking as many waiting clients as it has
-- permits), 0 if it already existed (nothing changed); WRONGTYPE if the permits key holds
-- anything but a count, or a generation exists without permits (scripts create them
-- together: it is foreign data, and is left alone).

if redis.call('EXISTS', KEYS[1]) == 1 then
    if not tonumber(redis.call('GET', KEYS[1])) then
        return redis.error_reply('WRONGTYPE the permits key holds no count')
    end
    return 0
end
if not redis.call('SET', KEYS[2], ARGV[2], 'NX') then
    return redis.error_reply('WRONGTYPE the generation key exists without permits')
end
redis.call('SET', KEYS[1], ARGV[1])
wake_waiters(KEYS[3], ARGV[1], ARGV[1])
return 1
