-- lock_force_unlock: free a lock whoever holds it, tell its holder, and wake the client that
-- has waited longest. (Prefixed with publish_prelude.lua, lock_prelude.lua and
-- wake_prelude.lua.)
--
-- KEYS[1]  lock hash
-- KEYS[2]  waiting clients (see wake_prelude)
-- ARGV[1]  lost-notice channel prefix: the holder's client hears at once that its hold is gone
--          (see publish_lost); '' for none
--
-- Returns 1 if the lock was held, 0 if it was already free; WRONGTYPE (nothing deleted) if
-- the key holds foreign data. The fencing counter is kept, so tokens never repeat.

local holder = lock_holder(KEYS[1])
if not holder then
    return 0
end
redis.call('DEL', KEYS[1])
publish_lost(ARGV[1], {holder[1]})
wake_next_waiter(KEYS[2], 16)
return 1
