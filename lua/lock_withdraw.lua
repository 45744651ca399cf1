-- lock_withdraw: take a client out of a lock's waiters when its last waiting task gave up,
-- and pass on a wake-up it may have swallowed. (Prefixed with lock_prelude.lua and
-- wake_prelude.lua.)
--
-- KEYS[1]  lock hash (layout in lock_prelude)
-- KEYS[2]  waiting clients (see wake_prelude)
-- ARGV[1]  wake-up channel of the client
--
-- Returns 1 if another client was woken (the lock is free and someone waits), else 0.

unregister_waiter(KEYS[2], ARGV[1])
if lock_holder(KEYS[1]) then
    -- The last client gone: the hold's release need not look for one (see lock_prelude).
    if redis.call('EXISTS', KEYS[2]) == 0 then
        redis.call('HDEL', KEYS[1], 'w')
    end
    return 0
end
return wake_next_waiter(KEYS[2], 16)
