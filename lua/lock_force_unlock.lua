-- lock_force_unlock: free a lock whoever holds it, and wake its waiters (for the fair lock,
-- the head waiter).
--
-- KEYS[1]  lock hash
-- KEYS[2]  (fair lock only) queue of waiters, see lock_prelude
-- KEYS[3]  (fair lock only) waiter deadlines, see lock_prelude
-- ARGV[1]  channel to publish on; for the fair lock, the wake-up channel prefix of waiters
--
-- Returns 1 if the lock was held, 0 if it was already free; WRONGTYPE (nothing deleted) if
-- a key holds foreign data. The fencing counter is kept, so
-- tokens never repeat; waiters keep their places.

check_lock_hash(KEYS[1])
if KEYS[2] then
    tidy_queue(KEYS[2], KEYS[3], math.floor(now_us() / 1000))
end
if redis.call('DEL', KEYS[1]) == 0 then
    return 0
end
if KEYS[2] then
    wake_head(KEYS[2], ARGV[1])
else
    redis.call('PUBLISH', ARGV[1], 'released')
end
return 1
