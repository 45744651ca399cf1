-- election_resign: give up the leadership one campaign attempt won, if it won it, and wake
-- the next campaigner. (Prefixed with publish_prelude.lua, wake_prelude.lua and
-- election_prelude.lua.)
--
-- Used by resign and by a dropped Leadership (with no record: ARGV[2] = 0), and by a campaign
-- whose caller went away, whether or not Redis has run that campaign yet (with a record).
--
-- KEYS[1]  leader hash (layout in election_prelude)
-- KEYS[2]  attempt record: the result of the first give-back of this attempt, so that a
--          repeat gets the same answer; its existence also forbids a late campaign of this
--          attempt from winning (see election_campaign). Only written when ARGV[2] > 0.
-- KEYS[3]  waiting clients (see wake_prelude)
-- ARGV[1]  attempt id whose leadership to give up
-- ARGV[2]  how long to keep the attempt record, in ms; 0 = keep none (a Leadership's own
--          resignation: its campaign was answered, and the client judges a repeat itself)
-- ARGV[3]  change channel (see election_campaign)
--
-- Returns 1 when the attempt led and no longer does (the change is announced and the client
-- that has waited longest is woken), -1 when it did not lead (its lease ran out, the election
-- was deleted, it never won, or this is a repeat of a resignation without a record).

if ARGV[2] ~= '0' then
    local recorded = redis.call('GET', KEYS[2])
    if recorded then
        return tonumber(recorded)
    end
end
local result = -1
local owner, _, term = election_leader(KEYS[1])
if owner == ARGV[1] then
    redis.call('DEL', KEYS[1])
    publish(ARGV[3], term)
    wake_next_waiter(KEYS[3], 16)
    result = 1
end
if ARGV[2] ~= '0' then
    redis.call('SET', KEYS[2], result, 'PX', ARGV[2])
end
return result
