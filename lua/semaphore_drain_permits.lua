-- semaphore_drain_permits: take every available permit at once.
--
-- KEYS[1]  permits
--
-- Returns the number of permits taken (0 when none were available; a negative count is left
-- as it is, since draining must never add permits); a WRONGTYPE error when the key holds
-- anything but a count.

local available = tonumber(redis.call('GET', KEYS[1]) or '0')
if not available then
    return redis.error_reply('WRONGTYPE the permits key holds no count')
end
if available > 0 then
    redis.call('SET', KEYS[1], 0)
    return available
end
return 0
