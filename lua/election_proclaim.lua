-- election_proclaim: change the value a leader advertises, keeping its term. (Prefixed with
-- publish_prelude.lua and election_prelude.lua.)
--
-- KEYS[1]  leader hash (layout in election_prelude)
-- ARGV[1]  attempt id of the leadership
-- ARGV[2]  its term
-- ARGV[3]  the new value
-- ARGV[4]  change channel (see election_campaign); a change is announced there
--
-- Returns 1 when the leadership is still the caller's (the value is now ARGV[3]), 0 when it is
-- gone (nothing changed).

local owner, value, term = election_leader(KEYS[1])
if owner ~= ARGV[1] or term ~= ARGV[2] then
    return 0
end
if value ~= ARGV[3] then
    redis.call('HSET', KEYS[1], 'value', ARGV[3])
    publish(ARGV[4], term)
end
return 1
