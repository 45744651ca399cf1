-- semaphore_delete: remove a semaphore (classic or expirable) and wake its waiters, who then
-- find no permits.
--
-- KEYS     every key of the semaphore: the permits, and for an expirable semaphore also its
--          permit deadlines
-- ARGV[1]  channel to publish on
--
-- Returns 1 if there was anything to remove, 0 otherwise.

if redis.call('DEL', unpack(KEYS)) > 0 then
    redis.call('PUBLISH', ARGV[1], 'deleted')
    return 1
end
return 0
