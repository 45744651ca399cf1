-- election_withdraw: take a client out of an election's waiters when its last campaigning
-- task gave up, and pass on a wake-up it may have swallowed. (Prefixed with
-- publish_prelude.lua, wake_prelude.lua and election_prelude.lua: a wake-up publishes.)
--
-- KEYS[1]  leader hash (layout in election_prelude)
-- KEYS[2]  waiting clients (see wake_prelude)
-- ARGV[1]  wake-up channel of the client
--
-- Returns 1 if another client was woken (nobody leads and someone waits), else 0.

remove_from_registry(KEYS[2], ARGV[1])
if election_leader(KEYS[1]) then
    return 0
end
return wake_next_waiter(KEYS[2], 16)
