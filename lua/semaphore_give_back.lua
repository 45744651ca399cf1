-- semaphore_give_back: undo an acquire attempt whose caller went away: return its permits if
-- it took them, or forbid it from taking any if Redis has not run it yet. Idempotent.
--
-- KEYS[1]  permits
-- KEYS[2]  attempt record of that acquire
-- ARGV[1]  n, the permits the attempt asked for
-- ARGV[2]  channel to publish on
-- ARGV[3]  how long to keep the record, in ms (longer than a late acquire could still run)
--
-- Returns 1 when permits were returned, 0 otherwise. A semaphore deleted meanwhile stays
-- deleted.

local state = redis.call('GET', KEYS[2])
if state == 'granted' then
    if redis.call('EXISTS', KEYS[1]) == 1 then
        redis.call('INCRBY', KEYS[1], ARGV[1])
        redis.call('PUBLISH', ARGV[2], ARGV[1])
    end
    redis.call('SET', KEYS[2], 'given back', 'PX', ARGV[3])
    return 1
end
if not state then
    redis.call('SET', KEYS[2], 'given back', 'PX', ARGV[3])
end
return 0
