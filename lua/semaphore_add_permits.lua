-- semaphore_add_permits: add (or, with a negative count, remove) permits; also the raw release
-- of permits taken without a permit object. Creates the semaphore if it does not exist.
--
-- KEYS[1]  permits: the number of available permits (may go negative)
-- ARGV[1]  permits to add (any integer)
-- ARGV[2]  channel to publish on
--
-- Returns the number of available permits afterwards. Waiters are woken when permits were
-- added.

local available = redis.call('INCRBY', KEYS[1], ARGV[1])
if tonumber(ARGV[1]) > 0 then
    redis.call('PUBLISH', ARGV[2], ARGV[1])
end
return available
