-- expirable_semaphore_acquire: take one permit with an id and a lease.
-- (Prefixed with expirable_semaphore_prelude.lua.)
--
-- KEYS[1]  permits
-- KEYS[2]  deadlines
-- KEYS[3]  record of this permit id; if it exists the acquire was given back before it ran
-- ARGV[1]  permit id (the acquire attempt's id)
-- ARGV[2]  lease in milliseconds
-- ARGV[3]  channel to publish on (when expired permits are reclaimed)
--
-- Returns {1} when the permit was taken, {0, wait} when none is free (wait = ms until the
-- nearest lease ends by itself, -1 if no permit is leased), {-1} when the attempt had been
-- given back.

if redis.call('EXISTS', KEYS[3]) == 1 then
    return {-1}
end
local now = now_ms()
reclaim(KEYS[1], KEYS[2], now, ARGV[3])
if pool(KEYS[1]) < 1 then
    local nearest = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
    if nearest[2] then
        return {0, math.max(1, tonumber(nearest[2]) - now)}
    end
    return {0, -1}
end
redis.call('DECR', KEYS[1])
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[2]), ARGV[1])
return {1}
