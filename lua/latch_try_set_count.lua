-- latch_try_set_count: arm a latch with a count, only if it is open.
--
-- KEYS[1]  latch hash (see latch_prelude)
-- ARGV[1]  count to arm with (1 ..= 2^63-1)
-- ARGV[2]  arming id, unique to this call
--
-- Returns 1 if the latch was armed, 0 if it was already armed (nothing changed).
-- Publishes nothing: waiters only care about openings.

if read_latch(KEYS[1]) then
    return 0
end
redis.call('HSET', KEYS[1], 'count', ARGV[1], 'arming', ARGV[2])
return 1
