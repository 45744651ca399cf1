-- lock_force_unlock: free a lock whoever holds it, and wake the client that has waited
-- longest. (Prefixed with lock_prelude.lua and wake_prelude.lua.)
--
-- KEYS[1]  lock hash
-- KEYS[2]  waiting clients (see wake_prelude)
--
-- Returns 1 if the lock was held, 0 if it was already free; WRONGTYPE (nothing deleted) if
-- the key holds foreign data. The fencing counter is kept, so tokens never repeat.

if not lock_holder(KEYS[1]) then
    return 0
end
redis.call('DEL', KEYS[1])
wake_next_waiter(KEYS[2], 16)
return 1
