-- latch_try_set_count: arm a latch with a count, only if it is open. (Prefixed with
-- publish_prelude.lua and latch_prelude.lua.)
--
-- KEYS[1]  latch hash (see latch_prelude)
-- KEYS[2]  opened: the count-downs of the arming that opened last
-- ARGV[1]  count to arm with (1 ..= 2^63-1)
-- ARGV[2]  arming id, unique to this call
--
-- Returns 1 if the latch was armed, 0 if it was already armed (nothing changed).
-- Publishes nothing: waiters only care about openings. Where the latch is open, one EXISTS
-- answers.

if redis.call('EXISTS', KEYS[1]) == 1 then
    -- Armed, or foreign data: read_latch raises WRONGTYPE for that.
    read_latch(KEYS[1])
    return 0
end
local prior = redis.call('EXISTS', KEYS[2])
redis.call('HSET', KEYS[1], 'count', ARGV[1], 'arming', ARGV[2], 'prior', prior)
return 1
