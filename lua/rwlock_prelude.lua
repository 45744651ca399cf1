-- rwlock_prelude: helpers shared by every rwlock script; prepended to each of them when the
-- crate embeds it, so the layout logic lives once. Not an operation of its own.
--
-- Layout (KEYS[1] and KEYS[2] of every rwlock script that touches holds):
--   hash     mode = 'read' | 'write' (for inspection; the fields below decide)
--            writer = <owner id>, wcount = <write holds>, wtoken = <fencing token>,
--            wexp = <end of the write lease, server ms>
--            r:<owner> = <read holds of that owner>
--            a:<attempt> = 'w' .. <token> for a write hold, 'r' .. <owner> for a read hold
--   readers  sorted set: <attempt> -> end of that read hold's lease (server ms)
-- Every hold has its own lease; both keys expire when the longest live hold ends, so a crashed
-- reader or writer blocks nobody beyond its own lease.

-- Fails with WRONGTYPE when the lock's keys hold something else: a hash without a mode (the
-- hash exists only while held, and always has one) or a non-sorted-set under readers or
-- waiting writers. Called before anything is written.
local function check_rwlock_keys(hash, readers, writers)
    if not redis.call('HGET', hash, 'mode') and redis.call('EXISTS', hash) == 1 then
        error({err = 'WRONGTYPE the read-write lock key holds foreign data'})
    end
    redis.call('ZCARD', readers)
    if writers then
        redis.call('ZCARD', writers)
    end
end

-- Server time in milliseconds: leases are judged by Redis's clock, never a client's.
local function now_ms()
    local t = redis.call('TIME')
    return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Forgets read holds whose lease ended, and the write hold (with its attempts' fields) if its
-- lease ended.
local function prune(hash, readers, now)
    local expired = redis.call('ZRANGEBYSCORE', readers, '-inf', now)
    for _, attempt in ipairs(expired) do
        local kind = redis.call('HGET', hash, 'a:' .. attempt)
        if kind then
            redis.call('HDEL', hash, 'a:' .. attempt)
            local owner_field = 'r:' .. string.sub(kind, 2)
            if redis.call('HINCRBY', hash, owner_field, -1) <= 0 then
                redis.call('HDEL', hash, owner_field)
            end
        end
    end
    if #expired > 0 then
        redis.call('ZREMRANGEBYSCORE', readers, '-inf', now)
    end
    local wexp = redis.call('HGET', hash, 'wexp')
    if wexp and tonumber(wexp) <= now then
        redis.call('HDEL', hash, 'writer', 'wcount', 'wtoken', 'wexp')
        -- A crashed writer never releases its attempts, and the hash may outlive the hold
        -- (the owner's read holds keep it), so their fields go with the hold. There is one
        -- write hold at a time: every write attempt field is this expired hold's.
        local all = redis.call('HGETALL', hash)
        for i = 1, #all, 2 do
            if string.sub(all[i], 1, 2) == 'a:' and string.sub(all[i + 1], 1, 1) == 'w' then
                redis.call('HDEL', hash, all[i])
            end
        end
    end
end

-- When the last live hold ends (server ms), 0 if none is left.
local function held_until(hash, readers)
    local last = redis.call('ZRANGE', readers, -1, -1, 'WITHSCORES')
    local until_ms = tonumber(last[2] or 0)
    local wexp = redis.call('HGET', hash, 'wexp')
    if wexp then
        until_ms = math.max(until_ms, tonumber(wexp))
    end
    return until_ms
end

-- Brings mode and expiry in line with the holds that remain, or deletes both keys when none
-- does. Returns whether the lock is still held.
local function settle(hash, readers, now)
    local until_ms = held_until(hash, readers)
    if until_ms <= now then
        redis.call('DEL', hash, readers)
        return false
    end
    if redis.call('HEXISTS', hash, 'writer') == 1 then
        redis.call('HSET', hash, 'mode', 'write')
    else
        redis.call('HSET', hash, 'mode', 'read')
    end
    redis.call('PEXPIREAT', hash, until_ms)
    redis.call('PEXPIREAT', readers, until_ms)
    return true
end

