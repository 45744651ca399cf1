-- rate_limiter_rate: read the limiter's rate.
--
-- KEYS[1]  config hash (see rate_limiter_prelude)
--
-- Returns {rate, per, burst} as strings, or an empty array when no rate is set.

local f = redis.call('HMGET', KEYS[1], 'rate', 'per', 'burst')
if not f[1] then
    return {}
end
return f
