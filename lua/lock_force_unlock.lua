-- lock_force_unlock: free a lock whoever holds it, and wake its waiters.
--
-- KEYS[1]  lock hash
-- ARGV[1]  channel to publish on
--
-- Returns 1 if the lock was held, 0 if it was already free. The fencing counter is kept, so
-- tokens never repeat.

if redis.call('DEL', KEYS[1]) == 1 then
    redis.call('PUBLISH', ARGV[1], 'released')
    return 1
end
return 0
