-- semaphore_give_back: undo an acquire attempt whose caller went away: return its permits if it
-- took them, or forbid it from taking any if Redis has not run it yet; and, if the attempt's
-- client has no task waiting any more, take the client out of the waiters, passing on a wake-up
-- it may have been sent. Idempotent. (Prefixed with publish_prelude.lua, wake_prelude.lua,
-- semaphore_wake_prelude.lua and semaphore_prelude.lua.)
--
-- KEYS[1]  permits
-- KEYS[2]  attempt record of that acquire
-- KEYS[3]  generation
-- KEYS[4]  waiters (see wake_prelude.lua)
-- ARGV[1]  n, the permits the attempt asked for
-- ARGV[2]  how long to keep a 'given back' record, in ms (longer than a late acquire could
--          still run)
-- ARGV[3]  the client's wake-up channel, to withdraw it from the waiters; '' to leave them
--
-- Returns 1 when the attempt had taken permits (given back now), 0 otherwise. Permits go back
-- only to the generation they were taken from: a semaphore deleted meanwhile stays deleted,
-- one created anew is not inflated. Only an attempt that took nothing leaves a record: one
-- that took permits has run, and cannot run again.

local available, current, state = read_semaphore(KEYS[1], KEYS[3], KEYS[2])
local generation = taken_from(state)
local freed, now_available = 0, available or 0
if generation then
    redis.call('DEL', KEYS[2])
    freed, now_available = return_permits(KEYS[1], available, current, generation, ARGV[1])
else
    redis.call('SET', KEYS[2], 'given back', 'PX', ARGV[2])
end
if ARGV[3] ~= '' then
    remove_from_registry(KEYS[4], ARGV[3])
    freed = freed + 1
end
wake_waiters(KEYS[4], freed, now_available)
if generation then
    return 1
end
return 0
