-- rwlock_acquire_read: take a read hold (shared), re-enter one, or downgrade from the write
-- hold. (Prefixed with clock_prelude.lua and rwlock_prelude.lua.)
--
-- KEYS[1]  lock hash      (see the prelude)
-- KEYS[2]  readers        (see the prelude)
-- KEYS[3]  waiting writers: sorted set <waiter id> -> when that mark lapses (server ms)
-- KEYS[4]  attempt record of this attempt; exists only if the attempt was given back already
-- ARGV[1]  owner id
-- ARGV[2]  lease in milliseconds
-- ARGV[3]  attempt id
-- ARGV[4]  '1' to give way to waiting writers (writer preference), '0' not to
-- ARGV[5]  waiter id of the read() call (the same for all its attempts) if it waits when the
--          lock is taken: it is then registered (see `w` in the prelude), so that the release
--          that lets it in publishes; '' if it gives up at once
-- ARGV[6]  '1' for a hold that a client's local readers share (see `sh` in the prelude)
--
-- Returns the owner's read holds now (an integer, not a table) when granted, {0, wait} when a
-- writer holds the lock or one is waiting (wait = ms until that could change by itself), or
-- {-1} when the attempt was given back before it ran. A grant answers with a plain integer:
-- a table reply measured about 2 µs more of Redis's time per call.
-- An owner that already reads, or that holds the write lock, is never made to wait.

local owner_field, attempt_field = 'r:' .. ARGV[1], 'a:' .. ARGV[3]
-- One read answers the common case: no hold, no record of this attempt, no waiting writer.
local present = redis.call('EXISTS', KEYS[1], KEYS[4], KEYS[3])
local now = now_ms()
local lease_end = now + tonumber(ARGV[2])
if present == 0 then
    -- Strings, not Lua numbers: Redis 7.0 turns a number argument into text with a costly
    -- floating-point format. The fields as arguments, not a table unpacked: a table is one
    -- more thing to make and collect on every call.
    local lease_text = string.format('%d', lease_end)
    -- The readers set first: foreign data there fails the script before anything is written.
    redis.call('ZADD', KEYS[2], lease_text, ARGV[3])
    if ARGV[6] == '1' then
        redis.call('HSET', KEYS[1], 'mode', 'read', owner_field, '1', attempt_field,
            'r' .. ARGV[1], 'rc', '1', 'exp', lease_text, 'sh', '1')
    else
        redis.call('HSET', KEYS[1], 'mode', 'read', owner_field, '1', attempt_field,
            'r' .. ARGV[1], 'rc', '1', 'exp', lease_text)
    end
    expire_keys(KEYS[1], KEYS[2], lease_text)
    return 1
end

-- @uncommon: something holds or is marked, or this attempt was given back. The prelude
-- functions only these paths call are defined here, so a call that returned above never
-- makes them (see `script::arrange` in redisync-core).
local shared = {}
if ARGV[6] == '1' then
    shared = {'sh', 1}
end

-- The hash's fields (see the layout in the prelude): `holds` are the owner's read holds,
-- `waiters` the registered waiters as read, `registered` this read() call's registration.
local h = redis.call('HMGET', KEYS[1], 'mode', 'writer', 'wexp', owner_field, 'exp', 'rc', 'w',
    'w:' .. ARGV[5])
local mode, writer, wexp = h[1], h[2], tonumber(h[3] or 0)
local holds, exp, rc = tonumber(h[4] or 0), tonumber(h[5] or 0), tonumber(h[6] or 0)
local waiters, registered = h[7], h[8]
local marks = marks_besides_hash(present, KEYS[1], mode, KEYS[4])
if marks == nil then
    return {-1}
end

local function busy(wait_ms)
    -- Registered only where a release will look: in the hash, which exists while anything
    -- holds. (Behind a writer's mark on a free lock, that writer's grant notes it: `wm`.)
    if mode and ARGV[5] ~= '' and not registered then
        add_waiter_field(KEYS[1], ARGV[5], waiters)
    end
    return {0, math.max(1, wait_ms)}
end

if writer and wexp <= now then
    drop_write_hold(KEYS[1])
    writer = nil
end
if writer and writer ~= ARGV[1] then
    return busy(wexp - now)
end
if not writer and ARGV[4] == '1' and marks then
    -- An owner that reads already gets in past waiting writers (it would deadlock otherwise),
    -- as long as one of its holds is still live.
    if holds > 0 and rc > 0 then
        local pruned = prune_readers(KEYS[1], KEYS[2], now)
        if pruned > 0 then
            rc = rc - pruned
            holds = tonumber(redis.call('HGET', KEYS[1], owner_field) or 0)
        end
    end
    if holds == 0 then
        redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
        local first = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
        if first[1] then
            return busy(tonumber(first[2]) - now)
        end
    end
end

redis.call('ZADD', KEYS[2], lease_end, ARGV[3])
if registered then
    remove_waiter_field(KEYS[1], ARGV[5])
end
local fields = {owner_field, holds + 1, attempt_field, 'r' .. ARGV[1], 'rc', rc + 1,
    unpack(shared)}
local held_as = writer and 'write' or 'read'
if mode ~= held_as then
    table.insert(fields, 'mode')
    table.insert(fields, held_as)
end
if lease_end > exp then
    table.insert(fields, 'exp')
    table.insert(fields, lease_end)
end
-- Written before the expiry is set: the hash may not exist yet (only waiting writers' marks
-- did), and an expiry set on a missing key would leave the new hash without one.
hset(KEYS[1], fields)
if lease_end > exp then
    expire_keys(KEYS[1], KEYS[2], lease_end)
elseif rc == 0 then
    -- A new readers set (the owner downgrades): it expires with the hash.
    redis.call('PEXPIREAT', KEYS[2], exp)
end
return holds + 1
