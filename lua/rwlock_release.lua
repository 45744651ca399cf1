-- rwlock_release: give back the hold (read or write) one acquire attempt got, if it got one;
-- idempotent. (Prefixed with rwlock_prelude.lua.)
--
-- Used by unlock, by a dropped guard, and by an acquire whose caller went away (whether or not
-- Redis has run that acquire yet).
--
-- KEYS[1]  lock hash      (see the prelude)
-- KEYS[2]  readers        (see the prelude)
-- KEYS[3]  attempt record: the outcome of the first release of this attempt, so a retry gets
--          the same answer; its existence also stops a late acquire of this attempt
-- ARGV[1]  attempt id
-- ARGV[2]  channel to publish on when readers or a writer may now get in
-- ARGV[3]  how long to keep the attempt record, in ms
--
-- Returns 1 when the lock became free, 0 when the hold was given back and others remain, -1
-- when the attempt holds nothing (expired, force-unlocked, or never granted).
-- Publishes when the write hold ends (waiting readers may enter) or the lock becomes free (a
-- waiting writer may enter): one message, every waiter re-checks.

local recorded = redis.call('GET', KEYS[3])
if recorded then
    return tonumber(recorded)
end
local now = now_ms()
prune(KEYS[1], KEYS[2], now)
local attempt_field = 'a:' .. ARGV[1]
local kind = redis.call('HGET', KEYS[1], attempt_field)
local result = -1
if kind then
    redis.call('HDEL', KEYS[1], attempt_field)
    local wake = false
    if string.sub(kind, 1, 1) == 'r' then
        redis.call('ZREM', KEYS[2], ARGV[1])
        local owner_field = 'r:' .. string.sub(kind, 2)
        if redis.call('HINCRBY', KEYS[1], owner_field, -1) <= 0 then
            redis.call('HDEL', KEYS[1], owner_field)
        end
        result = 0
    elseif kind == 'w' .. (redis.call('HGET', KEYS[1], 'wtoken') or '') then
        if redis.call('HINCRBY', KEYS[1], 'wcount', -1) <= 0 then
            redis.call('HDEL', KEYS[1], 'writer', 'wcount', 'wtoken', 'wexp')
            wake = true
        end
        result = 0
    end
    if result == 0 and not settle(KEYS[1], KEYS[2], now) then
        result = 1
        wake = true
    end
    if wake then
        redis.call('PUBLISH', ARGV[2], 'released')
    end
end
redis.call('SET', KEYS[3], result, 'PX', ARGV[3])
return result
