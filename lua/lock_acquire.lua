-- lock_acquire: take a reentrant lock, or re-enter it if the caller already holds it.
--
-- KEYS[1]  lock hash   {owner = <owner id>, count = <holds>, token = <fencing token>}
-- KEYS[2]  fence       counter of fencing tokens; never expires, never deleted
-- ARGV[1]  owner id of the caller
-- ARGV[2]  lease in milliseconds
--
-- Returns {1, token, count} when acquired (count > 1 on a re-entry, which keeps the token of
-- the hold it enters), or {0, pttl} when another owner holds the lock (pttl is its remaining
-- lease in ms, -1 if it has none).
-- A re-entry never shortens the hold: the expiry becomes the longer of the current one and
-- the new lease, because other guards of the same hold may rely on it.

local holder = redis.call('HMGET', KEYS[1], 'owner', 'token')
if not holder[1] then
    local token = redis.call('INCR', KEYS[2])
    redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'count', 1, 'token', token)
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {1, token, 1}
end
if holder[1] == ARGV[1] then
    local count = redis.call('HINCRBY', KEYS[1], 'count', 1)
    if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
        redis.call('PEXPIRE', KEYS[1], ARGV[2])
    end
    return {1, tonumber(holder[2]), count}
end
return {0, redis.call('PTTL', KEYS[1])}
