-- election_delete: remove the leader, whoever it is, tell it, announce the change and wake
-- the next campaigner. The term counter stays, so terms never repeat; the waiters' registry
-- lapses by itself. (Prefixed with publish_prelude.lua, wake_prelude.lua and
-- election_prelude.lua.)
--
-- KEYS[1]  leader hash (layout in election_prelude)
-- KEYS[2]  waiting clients (see wake_prelude)
-- ARGV[1]  change channel (see election_campaign)
-- ARGV[2]  lost-notice channel prefix: the leader's client hears at once that it no longer
--          leads (see publish_lost); '' for none
--
-- Returns 1 if someone led, else 0.

local owner, _, term = election_leader(KEYS[1])
if not owner then
    return 0
end
redis.call('DEL', KEYS[1])
publish_lost(ARGV[2], {owner})
publish(ARGV[1], term)
wake_next_waiter(KEYS[2], 16)
return 1
