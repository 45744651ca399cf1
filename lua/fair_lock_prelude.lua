-- fair_lock_prelude: the fair lock's waiting queue; prepended (after lock_prelude) to the fair
-- lock's scripts. Not an operation of its own.
--
-- Layout of the queue:
--   queue      sorted set: waiter id -> arrival order (server microseconds, kept strictly
--              increasing), so the first member is the head
--   deadlines  sorted set: waiter id -> server ms after which the waiter counts as dead; every
--              attempt of a live waiter pushes it on (its heartbeat)
-- Each waiter has its own wake-up channel, <wake prefix><waiter id>: a release wakes only the
-- head, never the herd.

-- Server time in microseconds: the order and deadlines of waiters from many machines are
-- judged by Redis's clock, never a client's.
local function now_us()
    local t = redis.call('TIME')
    return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- Removes every waiter whose heartbeat stopped, wherever it stands in the queue (in batches:
-- after a stall of Redis, thousands of deadlines may pass at once, more than Lua can unpack),
-- and a head that has no deadline at all (the two sets got out of step, say by eviction), so
-- that no dead waiter can block the queue. fair_lock_force_unlock always calls this, acquire
-- and release whenever either key exists (where neither does there is nothing to tidy and no
-- foreign data), before they change the lock or the queue: it fails with WRONGTYPE on foreign
-- data under either key first. (Only the caller's own heartbeat, in fair_lock_acquire, is
-- written before it.) `time_ms` is the server's time in ms. Returns whether it removed any
-- waiter.
local function tidy_queue(queue, deadlines, time_ms)
    -- Numbers go to Redis as text: Redis 7.0 turns a number argument into text with a costly
    -- floating-point format.
    local now_text = string.format('%d', time_ms)
    local dead = redis.call('ZRANGEBYSCORE', deadlines, '-inf', now_text)
    for first = 1, #dead, 1000 do
        redis.call('ZREM', queue, unpack(dead, first, math.min(first + 999, #dead)))
    end
    if #dead > 0 then
        redis.call('ZREMRANGEBYSCORE', deadlines, '-inf', now_text)
    end
    local removed = #dead > 0
    while true do
        local head = redis.call('ZRANGE', queue, '0', '0')[1]
        if not head or redis.call('ZSCORE', deadlines, head) then
            return removed
        end
        redis.call('ZREM', queue, head)
        removed = true
    end
end

-- Adds `waiter` at the tail of the queue, or keeps its place; either way it counts as alive
-- for `place_ms` more. Both keys expire with the last live waiter's place, so the waiters of
-- crashed processes leave nothing behind even if nobody touches the lock again.
local function join_queue(queue, deadlines, waiter, now, place_ms)
    if not redis.call('ZSCORE', queue, waiter) then
        local tail = redis.call('ZRANGE', queue, '-1', '-1', 'WITHSCORES')
        local order = now
        if tail[2] and tonumber(tail[2]) >= order then
            order = tonumber(tail[2]) + 1
        end
        redis.call('ZADD', queue, string.format('%d', order), waiter)
    end
    redis.call('ZADD', deadlines, string.format('%d', math.floor(now / 1000) + place_ms), waiter)
    for _, key in ipairs({queue, deadlines}) do
        if redis.call('PTTL', key) < place_ms then
            redis.call('PEXPIRE', key, string.format('%d', place_ms))
        end
    end
end

local function leave_queue(queue, deadlines, waiter)
    redis.call('ZREM', queue, waiter)
    redis.call('ZREM', deadlines, waiter)
end

-- The waiter whose turn it is, or nil when nobody waits.
local function head_waiter(queue)
    return redis.call('ZRANGE', queue, '0', '0')[1]
end

-- Tells the head waiter (only) that the lock is free.
local function wake_head(queue, wake_prefix)
    local head = head_waiter(queue)
    if head then
        publish(wake_prefix .. head, 'released')
    end
end
