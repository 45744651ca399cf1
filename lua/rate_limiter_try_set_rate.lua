-- rate_limiter_try_set_rate: set the limiter's rate, only if none is set. (Prefixed with
-- rate_limiter_prelude.lua.)
--
-- KEYS[1]  config hash (see rate_limiter_prelude)
-- ARGV[1]  rate: units per period (>= 1)
-- ARGV[2]  per: the period, in microseconds
-- ARGV[3]  burst
-- ARGV[4]  pq, ARGV[5] pr: per = pq * rate + pr
-- ARGV[6]  tq, ARGV[7] tr: (burst + 1) * per / rate = tq + tr / rate
--
-- Returns 1 if the rate was set, 0 if one was set already (nothing changed). Publishes nothing:
-- nobody waits on a limiter without a rate (acquiring there is an error).

if redis.call('EXISTS', KEYS[1]) == 1 then
    -- Set already, or foreign data: reading it raises WRONGTYPE for data of another type.
    read_rate(KEYS[1])
    return 0
end
write_rate(KEYS[1], ARGV)
return 1
