-- lock_release: give back one hold of a reentrant lock; idempotent per request id.
--
-- KEYS[1]  lock hash   {owner, count, token}
-- KEYS[2]  release record of this request: remembers the result so that a retry after a lost
--          reply gets the same answer instead of releasing twice or reporting "not owner"
-- ARGV[1]  owner id of the guard
-- ARGV[2]  fencing token of the guard's hold (a stale guard of the same owner must not
--          release a newer hold)
-- ARGV[3]  channel to publish on when the lock becomes free
-- ARGV[4]  how long to remember the result, in ms
--
-- Returns 1 when the lock became free (waiters are woken), 0 when one hold was given back and
-- the owner still holds the lock, -1 when the hold is not ours (nothing changed).

local recorded = redis.call('GET', KEYS[2])
if recorded then
    return tonumber(recorded)
end
local holder = redis.call('HMGET', KEYS[1], 'owner', 'token')
if holder[1] ~= ARGV[1] or holder[2] ~= ARGV[2] then
    return -1
end
local result = 0
if redis.call('HINCRBY', KEYS[1], 'count', -1) <= 0 then
    redis.call('DEL', KEYS[1])
    redis.call('PUBLISH', ARGV[3], 'released')
    result = 1
end
redis.call('SET', KEYS[2], result, 'PX', ARGV[4])
return result
