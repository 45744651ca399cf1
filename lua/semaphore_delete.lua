-- semaphore_delete: remove a classic semaphore, ending its generation. Permits still out go
-- nowhere when they come back, even once the semaphore is created again. Waiters stay
-- registered: they find no permits, and whatever creates the semaphore again wakes them.
-- (Prefixed with semaphore_prelude.lua.)
--
-- KEYS[1]  permits
-- KEYS[2]  generation
--
-- Returns 1 if there was a semaphore to remove, 0 otherwise; WRONGTYPE (nothing removed) if
-- a key holds foreign data.

if not read_semaphore(KEYS[1], KEYS[2]) then
    return 0
end
redis.call('DEL', KEYS[1], KEYS[2])
return 1
