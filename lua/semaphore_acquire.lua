-- semaphore_acquire: take n permits at once, or none.
--
-- KEYS[1]  permits
-- KEYS[2]  attempt record of this attempt: 'granted' from here until the permits are released,
--          given back or forgotten (no expiry: the permits are outstanding that long); if it
--          already exists the attempt was given back before it ran
-- ARGV[1]  n, the permits to take (>= 1)
--
-- Returns 1 when the n permits were taken, 0 when fewer than n are available (nothing taken),
-- -1 when the attempt had been given back before it ran; a WRONGTYPE error when the permits
-- key holds anything but a count.

if redis.call('EXISTS', KEYS[2]) == 1 then
    return -1
end
local n = tonumber(ARGV[1])
local available = tonumber(redis.call('GET', KEYS[1]) or '0')
if not available then
    return redis.error_reply('WRONGTYPE the permits key holds no count')
end
if available < n then
    return 0
end
redis.call('DECRBY', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], 'granted')
return 1
