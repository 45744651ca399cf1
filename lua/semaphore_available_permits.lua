-- semaphore_available_permits: read the number of available permits (read-only).
--
-- KEYS[1]  permits
--
-- Returns the count, 0 for a semaphore that does not exist; a WRONGTYPE error when the key
-- holds anything but a count.

local available = tonumber(redis.call('GET', KEYS[1]) or '0')
if not available then
    return redis.error_reply('WRONGTYPE the permits key holds no count')
end
return available
