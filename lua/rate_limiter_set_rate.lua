-- rate_limiter_set_rate: set the limiter's rate, replacing any, and wake its waiters so that
-- they decide again under the new rate. (Prefixed with publish_prelude.lua and
-- rate_limiter_prelude.lua.)
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
-- Units taken stay taken: the backlog (tat - now, in units of the old rate) is carried over
-- as the same number of units of the new rate. That is computed in floats and rounded up to
-- a whole microsecond and one more (stricter, never looser). The last decision can no longer
-- be given back, since its earlier state is in the old rate's units.

local old = read_rate(KEYS[1])
write_rate(KEYS[1], ARGV)
local state = redis.call('HMGET', KEYS[2], 'tat', 'rem')
local tat, rem = state[1], state[2]
if old and tat then
    local now = now_us()
    local backlog = tonumber(tat) - now + tonumber(rem) / old.rate
    if backlog > 0 then
        local carried = math.ceil(backlog * old.rate / old.per
            * tonumber(ARGV[2]) / tonumber(ARGV[1])) + 1
        redis.call('HSET', KEYS[2], 'tat', int(now + carried), 'rem', '0')
        redis.call('HDEL', KEYS[2], 'last', 'ptat', 'prem')
        redis.call('PEXPIRE', KEYS[2], math.max(1, math.ceil(carried / 1000)))
    else
        redis.call('DEL', KEYS[2])
    end
end
publish(ARGV[8], 'rate')
return old and 1 or 0
