-- rwlock_acquire_write: take the write hold (exclusive), or re-enter it. (Prefixed with
-- rwlock_prelude.lua.)
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
-- ARGV[4]  waiter id: one per write() call, the same for all its attempts
-- ARGV[5]  how long a waiting mark lasts, in ms; 0 not to mark (the caller will not wait)
--
-- Returns {1, token, holds} when granted (a re-entry keeps the token of the hold it enters),
-- {0, wait} when busy (wait = ms until the current holds end by themselves; the caller is
-- then marked as a waiting writer, so new readers give way), {-1} when the attempt was given
-- back before it ran, or {-2} when the owner holds a read lock (upgrading would deadlock).

if redis.call('EXISTS', KEYS[5]) == 1 then
    return {-1}
end
check_rwlock_keys(KEYS[1], KEYS[2], KEYS[3])
local now = now_ms()
prune(KEYS[1], KEYS[2], now)
local write_end = now + tonumber(ARGV[2])
local writer = redis.call('HGET', KEYS[1], 'writer')
if writer == ARGV[1] then
    redis.call('ZREM', KEYS[3], ARGV[4])
    local holds = redis.call('HINCRBY', KEYS[1], 'wcount', 1)
    local token = redis.call('HGET', KEYS[1], 'wtoken')
    redis.call('HSET', KEYS[1], 'a:' .. ARGV[3], 'w' .. token)
    if tonumber(redis.call('HGET', KEYS[1], 'wexp')) < write_end then
        redis.call('HSET', KEYS[1], 'wexp', write_end)
    end
    settle(KEYS[1], KEYS[2], now)
    return {1, tonumber(token), holds}
end
if not writer and redis.call('HEXISTS', KEYS[1], 'r:' .. ARGV[1]) == 1 then
    return {-2}
end
if writer or redis.call('ZCARD', KEYS[2]) > 0 then
    local mark_ms = tonumber(ARGV[5])
    if mark_ms > 0 and redis.call('EXISTS', KEYS[6]) == 0 then
        redis.call('ZADD', KEYS[3], now + mark_ms, ARGV[4])
        local last = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')
        redis.call('PEXPIREAT', KEYS[3], tonumber(last[2]))
    end
    return {0, math.max(1, held_until(KEYS[1], KEYS[2]) - now)}
end
redis.call('ZREM', KEYS[3], ARGV[4])
local token = redis.call('INCR', KEYS[4])
redis.call('HSET', KEYS[1], 'writer', ARGV[1], 'wcount', 1, 'wtoken', token,
    'wexp', write_end, 'a:' .. ARGV[3], 'w' .. token)
settle(KEYS[1], KEYS[2], now)
return {1, token, 1}
