-- expirable_semaphore_delete: remove the pool and every leased permit, and wake waiters, who
-- then find no permits. (Prefixed with expirable_semaphore_prelude.lua.)
--
-- KEYS[1]  permits
-- KEYS[2]  deadlines
-- ARGV[1]  channel to publish on
--
-- Returns 1 if there was anything to remove, 0 otherwise; WRONGTYPE (nothing removed) if a
-- key holds foreign data.

pool(KEYS[1])
redis.call('ZCARD', KEYS[2])
if redis.call('DEL', KEYS[1], KEYS[2]) > 0 then
    redis.call('PUBLISH', ARGV[1], 'deleted')
    return 1
end
return 0
