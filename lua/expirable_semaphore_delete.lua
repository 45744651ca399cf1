-- expirable_semaphore_delete: remove the pool and every leased permit, telling the permits'
-- holders. Waiters stay registered: they find no permits, and whatever creates the semaphore
-- again wakes them. (Prefixed with publish_prelude.lua and expirable_semaphore_prelude.lua.)
--
-- KEYS[1]  permits
-- KEYS[2]  deadlines
-- ARGV[1]  lost-notice channel prefix: the holders' clients hear at once that their permits
--          are gone (see publish_lost); '' for none
--
-- Returns 1 if there was anything to remove, 0 otherwise; WRONGTYPE (nothing removed) if a
-- key holds foreign data.

pool(KEYS[1])
local holders = redis.call('ZRANGE', KEYS[2], 0, -1)
if redis.call('DEL', KEYS[1], KEYS[2]) > 0 then
    publish_lost(ARGV[1], holders)
    return 1
end
return 0
