-- expirable_semaphore_prelude: helpers shared by the expirable semaphore's scripts; prepended
-- to each of them that works on permits. Not an operation of its own.
--
-- Layout (KEYS[1] and KEYS[2] of those scripts):
--   permits    string: the number of available permits (may be negative)
--   deadlines  sorted set: <permit id> -> end of that permit's lease (server ms)
-- A permit whose lease ended goes back to the pool the next time any script runs, so a
-- crashed holder's permits come back without anyone releasing them.

-- Server time in milliseconds: leases are judged by Redis's clock, never a client's.
local function now_ms()
    local t = redis.call('TIME')
    return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The number of available permits (0 when the pool does not exist). Foreign data under the
-- key is a WRONGTYPE error: a string that is not a count would otherwise read as nil.
local function pool(permits)
    local count = tonumber(redis.call('GET', permits) or '0')
    if not count then
        error(redis.error_reply('WRONGTYPE the permits key holds no count'))
    end
    return count
end

-- Returns expired permits to the pool and wakes waiters if there were any. Checks the pool
-- first, so that every script that writes reports foreign data.
local function reclaim(permits, deadlines, now, channel)
    pool(permits)
    local expired = redis.call('ZREMRANGEBYSCORE', deadlines, '-inf', now)
    if expired > 0 then
        redis.call('INCRBY', permits, expired)
        redis.call('PUBLISH', channel, expired)
    end
end

