-- fair_lock_force_unlock: free a fair lock whoever holds it, tell its holder, and wake the head
-- waiter. (Prefixed with publish_prelude.lua, clock_prelude.lua, lock_prelude.lua and
-- fair_lock_prelude.lua.)
--
-- KEYS[1]  lock hash
-- KEYS[2]  queue of waiters, see fair_lock_prelude
-- KEYS[3]  waiter deadlines, see fair_lock_prelude
-- ARGV[1]  wake-up channel prefix of waiters
-- ARGV[2]  lost-notice channel prefix (see publish_lost); '' for none
--
-- Returns 1 if the lock was held, 0 if it was already free; WRONGTYPE (nothing deleted) if
-- a key holds foreign data. The fencing counter is kept, so tokens never repeat; waiters keep
-- their places. On a free lock it wakes the head only if tidying removed waiters (the head
-- may be new, and nobody has told it yet; see fair_lock_acquire).

local held = lock_holder(KEYS[1])
local tidied = tidy_queue(KEYS[2], KEYS[3], now_ms())
if not held then
    if tidied then
        wake_head(KEYS[2], ARGV[1])
    end
    return 0
end
redis.call('DEL', KEYS[1])
publish_lost(ARGV[2], {held[1]})
wake_head(KEYS[2], ARGV[1])
return 1
