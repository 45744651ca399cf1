-- semaphore_withdraw: a client whose last waiting task gave up (its wait ran out, its future
-- was dropped, or it failed) leaves the waiters; if permits are free, the wake-up it may have
-- been sent meanwhile is passed on to the next client. (Prefixed with publish_prelude.lua,
-- wake_prelude.lua, semaphore_wake_prelude.lua and semaphore_prelude.lua.)
--
-- KEYS[1]  permits
-- KEYS[2]  generation
-- KEYS[3]  waiters (see wake_prelude.lua)
-- ARGV[1]  the client's wake-up channel
--
-- Returns 1 if a wake-up was passed on, 0 otherwise.

remove_from_registry(KEYS[3], ARGV[1])
local available = read_semaphore(KEYS[1], KEYS[2])
if available and available > 0 then
    return wake_next_waiter(KEYS[3], WAKE_TRIES)
end
return 0
