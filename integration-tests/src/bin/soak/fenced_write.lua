-- fenced_write: the soak test's fenced register. A write is accepted only with a fencing
-- token at least the highest accepted so far for the resource, as a storage service that
-- checks tokens would do.
--
-- KEYS[1]  hash of the resource: `max` (highest accepted token), `accepted`, `rejected`
-- ARGV[1]  the writer's fencing token
--
-- Returns 1 if the write was accepted, 0 if it was refused (a higher token wrote before).
local token = tonumber(ARGV[1])
local max = tonumber(redis.call('HGET', KEYS[1], 'max') or '0')
if token >= max then
    redis.call('HSET', KEYS[1], 'max', ARGV[1])
    redis.call('HINCRBY', KEYS[1], 'accepted', 1)
    return 1
end
redis.call('HINCRBY', KEYS[1], 'rejected', 1)
return 0
