-- expirable_semaphore_acquire: take one permit with an id and a lease. (Prefixed with
-- publish_prelude.lua, clock_prelude.lua, wake_prelude.lua, semaphore_wake_prelude.lua and
-- expirable_semaphore_prelude.lua.)
--
-- KEYS[1]  permits
-- KEYS[2]  deadlines
-- KEYS[3]  record of this permit id; if it exists the acquire was given back before it ran
-- KEYS[4]  waiters (see wake_prelude.lua)
-- ARGV[1]  permit id (the acquire attempt's id)
-- ARGV[2]  lease in milliseconds
-- ARGV[3]  the client's wake-up channel, '' for a first try (see after_attempt)
-- ARGV[4]  '1' if more tasks of the client wait, '0' otherwise (see after_attempt)
-- ARGV[5]  how long the waiters registry lasts at least, in ms
--
-- ARGV[3..5] are optional, all together: a call without them is a first try (ARGV[3] = ''),
-- which reads none of them. Redis spends time on each argument sent.
--
-- Returns 1 (an integer, not a table) when the permit was taken, {0, wait} when none is free
-- (wait = ms until the nearest lease ends by itself, -1 if no permit is leased; a waiting
-- client is registered), {-1} when the attempt had been given back. A grant answers with a
-- plain integer: a table reply measured about 2 µs more of Redis's time per call. Expired
-- permits are reclaimed only when the pool is empty: while it has
-- permits, taking one needs no more.

local channel = ARGV[3] or ''
local values = redis.call('MGET', KEYS[1], KEYS[3])
local count, given_back = values[1], values[2]
if given_back then
    return {-1}
end
local now = now_ms()
local available = tonumber(count)
-- The common case: a permit is free, and this is a first try, which leaves the registry of
-- waiting clients alone (see after_attempt).
if channel == '' and available and not (available < 1) then
    redis.call('ZADD', KEYS[2], string.format('%d', now + tonumber(ARGV[2])), ARGV[1])
    redis.call('DECR', KEYS[1])
    return 1
end

-- @uncommon: no permit is free (expired ones may be reclaimed), or the caller waits. The
-- prelude functions only these paths call are defined here, so a call that returned above
-- never makes them (see `script::arrange` in redisync-core).
local reclaimed = 0
if not available or available < 1 then
    -- Also where MGET read foreign data as nil or a string that is no count: pool() raises.
    available, reclaimed = reclaim(KEYS[1], KEYS[2], now)
end
if available < 1 then
    after_attempt(KEYS[4], channel, ARGV[4], ARGV[5], false)
    local nearest = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
    if nearest[2] then
        return {0, math.max(1, tonumber(nearest[2]) - now)}
    end
    return {0, -1}
end
redis.call('ZADD', KEYS[2], string.format('%d', now + tonumber(ARGV[2])), ARGV[1])
redis.call('DECR', KEYS[1])
after_attempt(KEYS[4], channel, ARGV[4], ARGV[5], true)
wake_waiters(KEYS[4], reclaimed, available - 1)
return 1
