-- lock_acquire: take a reentrant lock, or re-enter it if the caller already holds it.
--
-- KEYS[1]  lock hash   {owner = <owner id>, count = <holds>, token = <fencing token>,
--                       a:<attempt id> = 1 for every live hold}
-- KEYS[2]  fence       counter of fencing tokens; never expires, never deleted
-- KEYS[3]  attempt record of this attempt; exists only if the attempt was already given back
--          (lock_release ran for it first: its caller gave up), so it must not grant
-- ARGV[1]  owner id of the caller
-- ARGV[2]  lease in milliseconds
-- ARGV[3]  attempt id, unique per acquire request
--
-- Returns {1, token, count} when acquired (count > 1 on a re-entry, which keeps the token of
-- the hold it enters), {0, pttl} when another owner holds the lock (pttl is its remaining
-- lease in ms, -1 if it has none), or {-1} when the attempt was given back before it ran.
-- A re-entry never shortens the hold: the expiry becomes the longer of the current one and
-- the new lease, because other guards of the same hold may rely on it.

if redis.call('EXISTS', KEYS[3]) == 1 then
    return {-1}
end
local attempt = 'a:' .. ARGV[3]
local holder = redis.call('HMGET', KEYS[1], 'owner', 'token')
if not holder[1] then
    local token = redis.call('INCR', KEYS[2])
    redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'count', 1, 'token', token, attempt, 1)
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {1, token, 1}
end
if holder[1] == ARGV[1] then
    local count = redis.call('HINCRBY', KEYS[1], 'count', 1)
    redis.call('HSET', KEYS[1], attempt, 1)
    if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
        redis.call('PEXPIRE', KEYS[1], ARGV[2])
    end
    return {1, tonumber(holder[2]), count}
end
return {0, redis.call('PTTL', KEYS[1])}
