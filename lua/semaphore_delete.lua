-- semaphore_delete: remove a semaphore (classic or expirable) and wake its waiters, who then
-- find no permits.
--
-- KEYS     every key of the semaphore: the permits, and for an expirable semaphore also its
--          permit deadlines
-- ARGV[1]  channel to publish on
--
-- Returns 1 if there was anything to remove, 0 otherwise; WRONGTYPE (nothing removed) if a
-- key holds foreign data.

local count = redis.call('GET', KEYS[1])
if count and not tonumber(count) then
    return redis.error_reply('WRONGTYPE the permits key holds no count')
end
if KEYS[2] then
    redis.call('ZCARD', KEYS[2])
end
if redis.call('DEL', unpack(KEYS)) > 0 then
    redis.call('PUBLISH', ARGV[1], 'deleted')
    return 1
end
return 0
