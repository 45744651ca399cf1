-- expirable_semaphore_give_back: undo an acquire attempt whose caller went away: return its
-- permit if it took one, or forbid it from taking one if Redis has not run it yet; and, if the
-- attempt's client has no task waiting any more, take the client out of the waiters, passing on
-- a wake-up it may have been sent. Idempotent. (Prefixed with publish_prelude.lua,
-- wake_prelude.lua, semaphore_wake_prelude.lua and expirable_semaphore_prelude.lua.)
--
-- KEYS[1]  permits
-- KEYS[2]  deadlines
-- KEYS[3]  record of the attempt's permit id
-- KEYS[4]  waiters (see wake_prelude.lua)
-- ARGV[1]  permit id
-- ARGV[2]  how long to keep a 'given back' record, in ms (longer than a late acquire could
--          still run)
-- ARGV[3]  the client's wake-up channel, to withdraw it from the waiters; '' to leave them
--
-- Returns 1 when the attempt had taken the permit (returned now), 0 otherwise. Only an
-- attempt that took nothing leaves a record: one that took the permit has run, and cannot
-- run again.

local ends = redis.call('ZSCORE', KEYS[2], ARGV[1])
local freed, available = 0, 0
if ends then
    available = redis.call('INCR', KEYS[1])
    redis.call('ZREM', KEYS[2], ARGV[1])
    freed = 1
else
    available = pool(KEYS[1])
    redis.call('SET', KEYS[3], 'given back', 'PX', ARGV[2])
end
if ARGV[3] ~= '' then
    remove_from_registry(KEYS[4], ARGV[3])
    freed = freed + 1
end
wake_waiters(KEYS[4], freed, available)
if ends then
    return 1
end
return 0
