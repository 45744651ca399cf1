-- rwlock_acquire_read: take a read hold (shared), re-enter one, or downgrade from the write
-- hold. (Prefixed with rwlock_prelude.lua.)
--
-- KEYS[1]  lock hash      (see the prelude)
-- KEYS[2]  readers        (see the prelude)
-- KEYS[3]  waiting writers: sorted set <waiter id> -> when that mark lapses (server ms)
-- KEYS[4]  attempt record of this attempt; exists only if the attempt was given back already
-- ARGV[1]  owner id
-- ARGV[2]  lease in milliseconds
-- ARGV[3]  attempt id
-- ARGV[4]  '1' to give way to waiting writers (writer preference), '0' not to
--
-- Returns {1, holds} when granted (holds = the owner's read holds now), {0, wait} when a
-- writer holds the lock or one is waiting (wait = ms until that could change by itself), or
-- {-1} when the attempt was given back before it ran.
-- An owner that already reads, or that holds the write lock, is never made to wait.

if redis.call('EXISTS', KEYS[4]) == 1 then
    return {-1}
end
check_rwlock_keys(KEYS[1], KEYS[2], KEYS[3])
local now = now_ms()
prune(KEYS[1], KEYS[2], now)
local writer = redis.call('HGET', KEYS[1], 'writer')
if writer and writer ~= ARGV[1] then
    return {0, math.max(1, tonumber(redis.call('HGET', KEYS[1], 'wexp')) - now)}
end
local owner_field = 'r:' .. ARGV[1]
if not writer and ARGV[4] == '1' and redis.call('HEXISTS', KEYS[1], owner_field) == 0 then
    redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
    local first = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
    if first[1] then
        return {0, math.max(1, tonumber(first[2]) - now)}
    end
end
local holds = redis.call('HINCRBY', KEYS[1], owner_field, 1)
redis.call('HSET', KEYS[1], 'a:' .. ARGV[3], 'r' .. ARGV[1])
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[2]), ARGV[3])
settle(KEYS[1], KEYS[2], now)
return {1, holds}
