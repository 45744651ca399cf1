-- rate_limiter_give_back: undo an allowed decision whose caller went away, if no decision
-- was allowed after it (then its units stay spent: giving them back later would let the next
-- window admit more than the rate). Idempotent.
--
-- KEYS[1]  state hash (see rate_limiter_prelude)
-- ARGV[1]  the decision's request id
--
-- Returns 1 if the units were given back, 0 if not.

local state = redis.call('HMGET', KEYS[1], 'last', 'ptat', 'prem')
local last, ptat, prem = state[1], state[2], state[3]
if last ~= ARGV[1] then
    return 0
end
redis.call('HSET', KEYS[1], 'tat', ptat, 'rem', prem)
redis.call('HDEL', KEYS[1], 'last', 'ptat', 'prem')
return 1
