-- semaphore_available_permits: read the number of available permits (read-only).
--
-- KEYS[1]  permits
--
-- Returns the count, 0 for a semaphore that does not exist.

return tonumber(redis.call('GET', KEYS[1]) or '0')
