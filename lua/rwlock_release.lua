-- rwlock_release: give back the hold (read or write) one acquire attempt got, if it got one.
-- (Prefixed with publish_prelude.lua, clock_prelude.lua and rwlock_prelude.lua.)
--
-- Used by unlock, by a dropped guard, and by an acquire whose caller went away (whether or not
-- Redis has run that acquire yet). Only the last needs a record: a late acquire of a
-- given-back attempt must be refused. An unlock keeps none, so Redis memory does not grow
-- with throughput; a repeat of it (its first try's reply was lost) finds nothing and answers
-- -1, which the client judges knowing it repeated (see `Confirmed` in core).
--
-- KEYS[1]  lock hash      (see the prelude)
-- KEYS[2]  readers        (see the prelude)
-- KEYS[3]  attempt record: written when the attempt holds nothing, so that its acquire, should
--          Redis run it later, is refused
-- ARGV[1]  attempt id
-- ARGV[2]  channel to publish on when readers or a writer may now get in
-- ARGV[3]  how long to keep the attempt record, in ms; 0 for no record (an unlock: the
--          acquire's reply was received, so no late acquire can come)
-- ARGV[4]  for the give-back of an acquire whose caller went away: the waiter id of its call,
--          whose registration as a waiter (made by this attempt, should it have been busy)
--          goes too; '' otherwise
--
-- KEYS[3], ARGV[3] and ARGV[4] are optional, all together: a call without them keeps no
-- record and names no waiter (an unlock). Redis spends time on each key and argument sent.
--
-- Returns 1 when the lock became free, 0 when the hold was given back and others remain, -1
-- when the attempt holds nothing (expired, force-unlocked, never granted, or already given
-- back). Publishes, when the write hold ends or the lock becomes free, only if someone
-- registered as waiting (`w`, `wm`): one message, every waiter re-checks.

local record_ms = ARGV[3] or '0'
local waiter = ARGV[4] or ''
local attempt_field = 'a:' .. ARGV[1]
-- The hash's fields (see the layout in the prelude): `kind` is the attempt's hold ('w' ..
-- token or 'r' .. owner, false if it holds nothing), `waiters` the registered waiters as read,
-- `held_back` the `wm` of a write hold granted over waiting writers' marks, `registered` the
-- waiter's registration.
local h = redis.call('HMGET', KEYS[1], attempt_field, 'writer', 'wcount', 'wtoken', 'wexp',
    'exp', 'rc', 'w', 'wm', 'w:' .. waiter)
local kind, writer, wcount, wtoken, wexp = h[1], h[2], h[3], h[4], h[5]
local exp, rc = tonumber(h[6] or 0), tonumber(h[7] or 0)
local waiters, held_back, registered = h[8], h[9], h[10]
-- The common cases: the lock's only hold, read or write, given back while nobody waits or
-- is registered (no `w`, `wm` or registration of the caller): its keys go, the readers set
-- only with a read hold in it, and nobody is told. (A read hold that is the only one ends at
-- `exp`, and the hash still exists: it is live; a write hold that ends last needs no look at
-- the clock either.)
if kind and not waiters and not held_back and not registered then
    if rc == 1 and not writer and string.sub(kind, 1, 1) == 'r' then
        redis.call('DEL', KEYS[1], KEYS[2])
        return 1
    end
    if rc == 0 and wcount == '1' and kind == 'w' .. (wtoken or '')
        and tonumber(wexp or 0) >= exp then
        redis.call('DEL', KEYS[1])
        return 1
    end
end

-- @uncommon: other holds remain, someone waits, or the attempt holds nothing. The prelude
-- functions only these paths call are defined here, so a release that returned above never
-- makes them (see `script::arrange` in redisync-core).
local waiter_count = tonumber(waiters or 0)
if registered then
    remove_waiter_field(KEYS[1], waiter)
    waiter_count = waiter_count - 1
end

local function nothing_held()
    if tonumber(record_ms) > 0 then
        redis.call('SET', KEYS[3], -1, 'PX', record_ms)
    end
    return -1
end

-- The lock is free: the keys go (the readers set only if read holds were in it: anything
-- else there is not ours), and whoever waits hears of it.
local function freed()
    if rc > 0 then
        redis.call('DEL', KEYS[1], KEYS[2])
    else
        redis.call('DEL', KEYS[1])
    end
    if waiter_count > 0 or held_back then
        publish(ARGV[2], 'released')
    end
    return 1
end

-- This hold, which ended at `exp`, was the longest: the keys now expire with the longest hold
-- left, or go if none is left. Returns whether the lock is still held.
local function shrink(fields, wexp)
    local until_ms = longest_hold(KEYS[2], wexp)
    if until_ms <= now_ms() then
        freed()
        return false
    end
    table.insert(fields, 'exp')
    table.insert(fields, until_ms)
    expire_keys(KEYS[1], KEYS[2], until_ms)
    return true
end

if not kind then
    return nothing_held()
end
if string.sub(kind, 1, 1) == 'r' then
    if rc == 1 and not writer then
        -- The only hold, so it ends at `exp`, and the hash still exists: it is live.
        return freed()
    end
    local ends = tonumber(redis.call('ZSCORE', KEYS[2], ARGV[1]) or 0)
    if ends < exp then
        local now = now_ms()
        if ends <= now then
            -- Its lease ended: forget it (and any other that ended). The hold ending at
            -- `exp` is live, so the lock stays held.
            prune_readers(KEYS[1], KEYS[2], now)
            return nothing_held()
        end
    end
    redis.call('ZREM', KEYS[2], ARGV[1])
    local owner_field = 'r:' .. string.sub(kind, 2)
    if redis.call('HINCRBY', KEYS[1], owner_field, -1) <= 0 then
        redis.call('HDEL', KEYS[1], owner_field, attempt_field)
    else
        redis.call('HDEL', KEYS[1], attempt_field)
    end
    local fields = {'rc', rc - 1}
    if ends == exp and not shrink(fields, wexp) then
        return 1
    end
    hset(KEYS[1], fields)
    return 0
end
local write_ends = tonumber(wexp or 0)
if kind ~= 'w' .. (wtoken or '') then
    return nothing_held() -- an earlier write hold's attempt
end
if write_ends < exp and write_ends <= now_ms() then
    -- Its lease ended: forget it. The owner's read hold ending at `exp` is live, so the lock
    -- stays read-locked.
    drop_write_hold(KEYS[1])
    redis.call('HSET', KEYS[1], 'mode', 'read')
    return nothing_held()
end
if tonumber(wcount) > 1 then
    redis.call('HSET', KEYS[1], 'wcount', tonumber(wcount) - 1)
    redis.call('HDEL', KEYS[1], attempt_field)
    return 0
end
if rc == 0 then
    return freed()
end
-- The owner's read holds stay (a downgrade): the lock is read-locked now, and readers waiting
-- behind the write hold may get in.
redis.call('HDEL', KEYS[1], 'writer', 'wcount', 'wtoken', 'wexp', attempt_field, 'wm')
local fields = {'mode', 'read'}
if write_ends == exp and not shrink(fields, nil) then
    return 1
end
hset(KEYS[1], fields)
if waiter_count > 0 or held_back then
    publish(ARGV[2], 'released')
end
return 0
