-- lock_withdraw: take a client out of a lock's waiters when its last waiting task gave up, and
-- pass on a wake-up it may have swallowed, or a hold handed over to it that none of its tasks
-- took. (Prefixed with publish_prelude.lua, clock_prelude.lua, lock_prelude.lua,
-- wake_prelude.lua and lock_hand_over_prelude.lua.)
--
-- KEYS[1]  lock hash (layout in lock_prelude)
-- KEYS[2]  waiting clients (see wake_prelude)
-- KEYS[3]  hand-over offers (see lock_hand_over_prelude)
-- KEYS[4]  fence: the counter of fencing tokens, for a hand-over's grant
-- ARGV[1]  wake-up channel of the client
-- ARGV[2]  attempts of the client's waiting tasks that offered and whose hand-over the client
--          has not taken (attempt ids separated by spaces; '' none): a hold handed over to
--          one of them is given back
--
-- Returns 1 if another client was woken or handed the lock (it was free and someone waits),
-- else 0.

remove_from_registry(KEYS[2], ARGV[1])
offer_hand_over(KEYS[3], ARGV[1], false)
local held = lock_holder(KEYS[1]) and not give_back_handed_over(KEYS[1], ARGV[2])
if held then
    -- The last client gone: the hold's release need not look for one (see lock_prelude).
    if redis.call('EXISTS', KEYS[2]) == 0 then
        redis.call('HDEL', KEYS[1], 'w')
    end
    return 0
end
return hand_over_or_wake(KEYS[2], KEYS[3], KEYS[1], KEYS[4], 16)
