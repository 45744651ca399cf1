-- expirable_semaphore_delete: remove the pool and every leased permit. Waiters stay
-- registered: they find no permits, and whatever creates the semaphore again wakes them.
-- (Prefixed with expirable_semaphore_prelude.lua.)
--
-- KEYS[1]  permits
-- KEYS[2]  deadlines
--
-- Returns 1 if there was anything to remove, 0 otherwise; WRONGTYPE (nothing removed) if a
-- key holds foreign data.

pool(KEYS[1])
redis.call('ZCARD', KEYS[2])
if redis.call('DEL', KEYS[1], KEYS[2]) > 0 then
    return 1
end
return 0
