-- rate_limiter_set_rate: set the limiter's rate, replacing any, and wake its waiters so that
-- they decide again under the new rate.
--
-- KEYS[1]  config hash (see rate_limiter_prelude)
-- KEYS[2]  state hash
-- ARGV[1]  rate: units per period (>= 1)
-- ARGV[2]  per: the period, in microseconds
-- ARGV[3]  burst
-- ARGV[4]  pq, ARGV[5] pr: per = pq * rate + pr
-- ARGV[6]  tq, ARGV[7] tr: (burst + 1) * per / rate = tq + tr / rate
-- ARGV[8]  channel to publish on
--
-- Returns 1 if a rate was replaced, 0 if none was set.
--
-- The arrival time is kept (what was taken stays taken), but its fraction of a microsecond is
-- counted in units of the old rate: it is rounded up to a whole microsecond (stricter, never
-- looser). The last decision can no longer be given back, since its earlier state is in the old
-- rate's units too.

local replaced = redis.call('EXISTS', KEYS[1])
write_rate(KEYS[1], ARGV)
local state = redis.call('HMGET', KEYS[2], 'tat', 'rem')
if state[1] then
    local tat = tonumber(state[1])
    if tonumber(state[2]) > 0 then
        tat = tat + 1
    end
    redis.call('HSET', KEYS[2], 'tat', int(tat), 'rem', '0')
    redis.call('HDEL', KEYS[2], 'last', 'ptat', 'prem')
end
publish(ARGV[8], 'rate')
return replaced
