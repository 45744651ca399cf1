-- semaphore_delete: remove a classic semaphore, ending its generation, and wake its waiters,
-- who then find no permits. Permits still out go nowhere when they come back, even once the
-- semaphore is created again. (Prefixed with semaphore_prelude.lua.)
--
-- KEYS[1]  permits
-- KEYS[2]  generation
-- ARGV[1]  channel to publish on
--
-- Returns 1 if there was a semaphore to remove, 0 otherwise; WRONGTYPE (nothing removed) if
-- a key holds foreign data.

if not read_semaphore(KEYS[1], KEYS[2]) then
    return 0
end
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('PUBLISH', ARGV[1], 'deleted')
return 1
