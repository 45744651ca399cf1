-- election_leader: who leads, for leader() and observe(); reads only. (Prefixed with
-- election_prelude.lua.)
--
-- KEYS[1]  leader hash (layout in election_prelude)
--
-- Returns {} when nobody leads, else {value, term, pttl} as strings (pttl: the leader's
-- remaining lease in ms; an observer re-reads when it ends, since an expiry announces nothing).

local owner, value, term = election_leader(KEYS[1])
if not owner then
    return {}
end
return {value, term, string.format('%d', redis.call('PTTL', KEYS[1]))}
