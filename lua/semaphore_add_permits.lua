-- semaphore_add_permits: add (or, with a negative count, remove) permits; also the raw release
-- of permits taken without a permit object. Creates the semaphore, with a new generation, if it
-- does not exist. (Prefixed with publish_prelude.lua, wake_prelude.lua and
-- semaphore_wake_prelude.lua.)
--
-- KEYS[1]  permits: the number of available permits (may go negative)
-- KEYS[2]  generation: a unique id of this incarnation of the semaphore (see
--          semaphore_prelude.lua)
-- KEYS[3]  waiters (see wake_prelude.lua)
-- ARGV[1]  permits to add (any integer)
-- ARGV[2]  a new unique id, the generation if this creates the semaphore
--
-- Returns the number of available permits afterwards. Added permits wake as many waiting
-- clients, as far as there are permits free. WRONGTYPE if the permits key holds anything but
-- a count, or a generation exists without permits (scripts create them together: it is
-- foreign data, and is left alone).

if redis.call('EXISTS', KEYS[1]) == 0 and not redis.call('SET', KEYS[2], ARGV[2], 'NX') then
    return redis.error_reply('WRONGTYPE the generation key exists without permits')
end
local available = redis.call('INCRBY', KEYS[1], ARGV[1])
wake_waiters(KEYS[3], ARGV[1], available)
return available
