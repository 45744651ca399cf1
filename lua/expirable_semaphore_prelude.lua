-- expirable_semaphore_prelude: the expirable semaphore's layout and the helpers its scripts
-- share; prepended to each of them that works on permits (after semaphore_wake_prelude.lua
-- where a script frees permits). Not an operation of its own.
--
-- Layout:
--   permits    string: the number of available permits in the pool (may be negative)
--   deadlines  sorted set: <permit id> -> end of that permit's lease (server ms)
--   record     string, one per acquire attempt given back before Redis may have run it:
--              'given back', expiring, so that the attempt can no longer take a permit. No
--              other call leaves anything behind.
--   waiters    sorted set: the clients waiting, see wake_prelude.lua
-- A permit whose lease ended goes back to the pool lazily: when an acquire finds the pool
-- empty, when permits are added, and when it is released or given back itself; so a crashed
-- holder's permits come back without anyone releasing them.

-- The number of available permits (0 when the pool does not exist). Foreign data under the
-- key is a WRONGTYPE error: a string that is not a count would otherwise read as nil.
local function pool(permits)
    local count = tonumber(redis.call('GET', permits) or '0')
    if not count then
        error(redis.error_reply('WRONGTYPE the permits key holds no count'))
    end
    return count
end

-- Returns expired permits to the pool (checking the pool first, so that every script that
-- writes reports foreign data). Returns the permits available afterwards and how many came
-- back; waking waiters for them is the caller's part.
local function reclaim(permits, deadlines, now)
    local available = pool(permits)
    local expired = redis.call('ZREMRANGEBYSCORE', deadlines, '-inf', now)
    if expired > 0 then
        available = redis.call('INCRBY', permits, expired)
    end
    return available, expired
end

