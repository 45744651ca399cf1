-- semaphore_give_back: undo an acquire attempt whose caller went away: return its permits if
-- it took them, or forbid it from taking any if Redis has not run it yet. Idempotent.
-- (Prefixed with semaphore_prelude.lua.)
--
-- KEYS[1]  permits
-- KEYS[2]  attempt record of that acquire
-- KEYS[3]  generation
-- ARGV[1]  n, the permits the attempt asked for
-- ARGV[2]  channel to publish on
-- ARGV[3]  how long to keep the record, in ms (longer than a late acquire could still run)
--
-- Returns 1 when the attempt had taken permits (given back now), 0 otherwise. Permits go back
-- only to the generation they were taken from: a semaphore deleted meanwhile stays deleted,
-- one created anew is not inflated.

local state = redis.call('GET', KEYS[2])
local generation = taken_from(state)
if generation then
    give_permits_back(KEYS[1], KEYS[3], generation, ARGV[1], ARGV[2])
    redis.call('SET', KEYS[2], 'given back', 'PX', ARGV[3])
    return 1
end
if not state then
    redis.call('SET', KEYS[2], 'given back', 'PX', ARGV[3])
end
return 0
