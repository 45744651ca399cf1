-- rwlock_acquire_write: take the write hold (exclusive), or re-enter it. (Prefixed with
-- publish_prelude.lua, clock_prelude.lua and rwlock_prelude.lua.)
--
-- KEYS[1]  lock hash      (see the prelude)
-- KEYS[2]  readers        (see the prelude)
-- KEYS[3]  waiting writers: sorted set <waiter id> -> when that mark lapses (server ms)
-- KEYS[4]  fence: counter of fencing tokens; never expires, never deleted
-- KEYS[5]  attempt record of this attempt; exists only if the attempt was given back already
-- KEYS[6]  waiter record: exists once this write() call withdrew its mark, so an attempt of it
--          that Redis runs only afterwards does not mark again
-- ARGV[1]  owner id
-- ARGV[2]  lease in milliseconds
-- ARGV[3]  attempt id
-- ARGV[4]  waiter id: one per write() call, the same for all its attempts; a busy attempt
--          that marks also registers it as waiting (see `w` in the prelude)
-- ARGV[5]  how long a waiting mark lasts, in ms; 0 not to mark (the caller will not wait)
-- ARGV[6]  drain channel: told when this writer starts waiting while shared read holds exist
--
-- Returns the fencing token (an integer, not a table) when granted (a re-entry keeps the
-- token of the hold it enters), {0, wait} when busy (wait = ms until the current holds end by
-- themselves; the caller is then marked as a waiting writer, so new readers give way), {-1}
-- when the attempt was given back before it ran, or {-2} when the owner holds a read lock
-- (upgrading would deadlock). A grant answers with a plain integer: a table reply
-- measured about 2 µs more of Redis's time per call.

local attempt_field = 'a:' .. ARGV[3]
-- One read answers the common case: no hold, no record of this attempt, no waiting writer.
local present = redis.call('EXISTS', KEYS[1], KEYS[5], KEYS[3])
local now = now_ms()
local write_end = now + tonumber(ARGV[2])
if present == 0 then
    local token = redis.call('INCR', KEYS[4])
    -- Strings, not Lua numbers: Redis 7.0 turns a number argument into text with a costly
    -- floating-point format.
    local token_text, end_text = string.format('%d', token), string.format('%d', write_end)
    redis.call('HSET', KEYS[1], 'mode', 'write', 'writer', ARGV[1], 'wcount', '1', 'wtoken',
        token_text, 'wexp', end_text, attempt_field, 'w' .. token_text, 'exp', end_text)
    redis.call('PEXPIREAT', KEYS[1], end_text)
    return token
end

-- @uncommon: something holds or is marked, or this attempt was given back. The prelude
-- functions only these paths call are defined here, so a call that returned above never
-- makes them (see `script::arrange` in redisync-core).

-- The hash's fields (see the layout in the prelude): `holds` are the owner's read holds,
-- `waiters` the registered waiters as read, `shared` whether a shared read hold was taken,
-- `registered` this write() call's registration.
local h = redis.call('HMGET', KEYS[1], 'mode', 'writer', 'wcount', 'wtoken', 'wexp',
    'r:' .. ARGV[1], 'exp', 'rc', 'w', 'sh', 'w:' .. ARGV[4])
local mode, writer, wcount, wtoken, wexp = h[1], h[2], h[3], h[4], tonumber(h[5] or 0)
local holds, exp, rc = tonumber(h[6] or 0), tonumber(h[7] or 0), tonumber(h[8] or 0)
local waiters, shared, registered = h[9], h[10], h[11]
local marks = marks_besides_hash(present, KEYS[1], mode, KEYS[5])
if marks == nil then
    return {-1}
end

if writer and wexp <= now then
    drop_write_hold(KEYS[1])
    writer = nil
end
-- A grant ends the call's wait: its mark and registration (by an earlier attempt) go.
local function stop_waiting()
    if marks then
        redis.call('ZREM', KEYS[3], ARGV[4])
    end
    if registered then
        remove_waiter_field(KEYS[1], ARGV[4])
    end
end

if writer == ARGV[1] then
    stop_waiting()
    local fields = {'wcount', tonumber(wcount) + 1, attempt_field, 'w' .. wtoken}
    if write_end > wexp then
        table.insert(fields, 'wexp')
        table.insert(fields, write_end)
    end
    if write_end > exp then
        table.insert(fields, 'exp')
        table.insert(fields, write_end)
        if rc > 0 then
            expire_keys(KEYS[1], KEYS[2], write_end)
        else
            redis.call('PEXPIREAT', KEYS[1], write_end)
        end
    end
    hset(KEYS[1], fields)
    return tonumber(wtoken)
end
if rc > 0 then
    local pruned = prune_readers(KEYS[1], KEYS[2], now)
    if pruned > 0 then
        rc = rc - pruned
        holds = tonumber(redis.call('HGET', KEYS[1], 'r:' .. ARGV[1]) or 0)
    end
end
if not writer and holds > 0 then
    return {-2}
end
if writer or rc > 0 then
    local mark_ms = tonumber(ARGV[5])
    if mark_ms > 0 and redis.call('EXISTS', KEYS[6]) == 0 then
        local added = redis.call('ZADD', KEYS[3], now + mark_ms, ARGV[4])
        -- Every mark lasts mark_ms from when it was set, so this one lapses last.
        redis.call('PEXPIREAT', KEYS[3], now + mark_ms)
        if not registered then
            add_waiter_field(KEYS[1], ARGV[4], waiters)
        end
        if added == 1 and shared then
            publish(ARGV[6], 'writer waits')
        end
    end
    return {0, math.max(1, exp - now)}
end
stop_waiting()
local token = redis.call('INCR', KEYS[4])
-- Readers held back by waiting writers' marks may wait for this hold's release.
local waiting = {}
if marks then
    waiting = {'wm', 1}
end
redis.call('HSET', KEYS[1], 'mode', 'write', 'writer', ARGV[1], 'wcount', 1, 'wtoken', token,
    'wexp', write_end, attempt_field, 'w' .. token, 'exp', write_end, unpack(waiting))
redis.call('PEXPIREAT', KEYS[1], write_end)
return token
