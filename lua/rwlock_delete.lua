-- rwlock_delete: remove all state of the lock (holds and waiting-writer marks) and wake
-- waiters. The fencing counter is kept, so tokens never repeat.
--
-- KEYS[1]  lock hash
-- KEYS[2]  readers
-- KEYS[3]  waiting writers
-- ARGV[1]  channel to publish on
--
-- Returns 1 if there was anything to remove, 0 otherwise.

check_rwlock_keys(KEYS[1], KEYS[2], KEYS[3])
if redis.call('DEL', KEYS[1], KEYS[2], KEYS[3]) > 0 then
    redis.call('PUBLISH', ARGV[1], 'deleted')
    return 1
end
return 0
