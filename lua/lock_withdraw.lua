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
    return 0
end
return wake_next_waiter(KEYS[2], 16)
