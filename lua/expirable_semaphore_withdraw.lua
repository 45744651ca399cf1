-- expirable_semaphore_withdraw: a client whose last waiting task gave up (its wait ran out, its
-- future was dropped, or it failed) leaves the waiters; if permits are free (expired ones
-- included), the wake-up it may have been sent meanwhile is passed on. (Prefixed with
-- publish_prelude.lua, clock_prelude.lua, wake_prelude.lua, semaphore_wake_prelude.lua and
-- expirable_semaphore_prelude.lua.)
--
-- KEYS[1]  permits
-- KEYS[2]  deadlines
-- KEYS[3]  waiters (see wake_prelude.lua)
-- ARGV[1]  the client's wake-up channel
--
-- Returns the number of permits available afterwards.

remove_from_registry(KEYS[3], ARGV[1])
local available, reclaimed = reclaim(KEYS[1], KEYS[2], now_ms())
wake_waiters(KEYS[3], reclaimed + 1, available)
return available
