-- lock_release: give back the hold one acquire attempt got, if it got one; idempotent. For
-- the fair lock, also take the attempt's waiter out of the queue.
--
-- Used by unlock, by a dropped guard, and by an acquire whose caller went away (whether or not
-- Redis has run that acquire yet).
--
-- KEYS[1]  lock hash   {owner, count, token, a:<attempt id> = 1 for every live hold}
-- KEYS[2]  attempt record: the result of the first release of this attempt, so that a retry
--          after a lost reply gets the same answer instead of releasing twice; its existence
--          also forbids a late acquire of this attempt from granting or queueing (see
--          lock_acquire)
-- KEYS[3]  (fair lock only) queue of waiters, see lock_prelude
-- KEYS[4]  (fair lock only) waiter deadlines, see lock_prelude
-- ARGV[1]  attempt id whose hold to give back (for the fair lock also the waiter id)
-- ARGV[2]  channel to publish on when the lock becomes free; for the fair lock, the wake-up
--          channel prefix of waiters, and only the head waiter is woken
-- ARGV[3]  how long to keep the attempt record, in ms
--
-- Returns 1 when the lock became free (waiters are woken), 0 when the hold was given back and
-- the owner still holds the lock through other holds, -1 when the attempt holds nothing (its
-- hold expired or was force-unlocked, or it never got one): nothing else is changed, except
-- that a fair waiter leaves the queue.

local recorded = redis.call('GET', KEYS[2])
if recorded then
    return tonumber(recorded)
end
if KEYS[3] then
    tidy_queue(KEYS[3], KEYS[4], math.floor(now_us() / 1000))
end
local result = -1
if redis.call('HDEL', KEYS[1], 'a:' .. ARGV[1]) == 1 then
    result = 0
    if redis.call('HINCRBY', KEYS[1], 'count', -1) <= 0 then
        redis.call('DEL', KEYS[1])
        result = 1
    end
end
if KEYS[3] then
    leave_queue(KEYS[3], KEYS[4], ARGV[1])
    -- Also when a waiter that was woken gives up: the next one must not sleep on.
    if redis.call('EXISTS', KEYS[1]) == 0 then
        wake_head(KEYS[3], ARGV[2])
    end
elseif result == 1 then
    redis.call('PUBLISH', ARGV[2], 'released')
end
redis.call('SET', KEYS[2], result, 'PX', ARGV[3])
return result
