-- latch_withdraw: a client whose last waiting task gave up (its wait ran out, its future was
-- dropped, or it failed) leaves the latch's waiters, so that an opening does not publish for
-- nobody. (Prefixed with publish_prelude.lua and wake_prelude.lua.)
--
-- KEYS[1]  waiters (see wake_prelude.lua)
-- ARGV[1]  the client's entry among the waiters (its id)
--
-- Returns 1.

remove_from_registry(KEYS[1], ARGV[1])
return 1
