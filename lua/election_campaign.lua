-- election_campaign: become the leader if nobody leads, else register the caller's client as
-- waiting. (Prefixed with publish_prelude.lua, wake_prelude.lua and election_prelude.lua.)
--
-- KEYS[1]  leader hash (layout in election_prelude)
-- KEYS[2]  term counter; never expires, never deleted
-- KEYS[3]  attempt record of this campaign attempt; exists only if the attempt was already
--          given back (election_resign ran for it first: its caller gave up), so it must not win
-- KEYS[4]  waiting clients (see wake_prelude)
-- ARGV[1]  attempt id, unique per campaign request: the leader's owner id if it wins
-- ARGV[2]  value the leader advertises
-- ARGV[3]  lease in milliseconds
-- ARGV[4]  wake-up channel of the caller's client for this election
-- ARGV[5]  how long the client's registration as a waiter lasts, in ms; 0 = never register
--          (the caller will not wait, try_campaign, or this is its first try, made before it
--          subscribed: a wake-up would reach nobody)
-- ARGV[6]  what a win does with the client's registration: '0' nothing (not registered, and
--          no other campaigner of the client waits), '1' take it out (an earlier attempt may
--          have registered it, and no other campaigner waits), '2' keep it, at the back
--          (clients take turns), unless ARGV[5] is 0: other campaigners of the client wait
-- ARGV[7]  change channel: every change of leader or value is announced there
--
-- Returns {1, term} when the caller now leads, {0, pttl} when someone else leads (pttl is
-- that leader's remaining lease in ms; the client is registered, so a resignation wakes it
-- when its turn comes), or {-1} when the attempt was given back before it ran.

if redis.call('EXISTS', KEYS[3]) == 1 then
    return {-1}
end
if election_leader(KEYS[1]) then
    if ARGV[5] ~= '0' then
        add_to_registry(KEYS[4], ARGV[4], ARGV[5])
    end
    return {0, redis.call('PTTL', KEYS[1])}
end
local term = redis.call('INCR', KEYS[2])
-- Strings, not Lua numbers: Redis 7.0 formats a number argument as a float.
local term_text = string.format('%d', term)
redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'value', ARGV[2], 'term', term_text)
redis.call('PEXPIRE', KEYS[1], ARGV[3])
publish(ARGV[7], term_text)
-- Won. The client waits no more, unless other campaigners of it wait: it then goes to the
-- back, so that other clients' campaigners get their turn first.
if ARGV[6] == '1' then
    remove_from_registry(KEYS[4], ARGV[4])
elseif ARGV[6] == '2' and ARGV[5] ~= '0' then
    requeue_in_registry(KEYS[4], ARGV[4], ARGV[5])
end
return {1, term}
