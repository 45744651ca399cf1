-- semaphore_acquire: take n permits at once, or none. (Prefixed with semaphore_prelude.lua.)
--
-- KEYS[1]  permits
-- KEYS[2]  attempt record of this attempt: 'granted:<generation>' from here until the permits
--          are released, given back or forgotten (no expiry: the permits are outstanding that
--          long); if it already exists the attempt was given back before it ran
-- KEYS[3]  generation
-- ARGV[1]  n, the permits to take (>= 1)
--
-- Returns 1 when the n permits were taken, 0 when fewer than n are available (nothing taken),
-- -1 when the attempt had been given back before it ran; a WRONGTYPE error when the keys hold
-- foreign data.

if redis.call('EXISTS', KEYS[2]) == 1 then
    return -1
end
local available, generation = read_semaphore(KEYS[1], KEYS[3])
if not available or available < tonumber(ARGV[1]) then
    return 0
end
redis.call('DECRBY', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], 'granted:' .. generation)
return 1
