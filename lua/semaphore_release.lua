-- semaphore_release: give back the n permits a permit object holds; idempotent per permit.
--
-- KEYS[1]  permits
-- KEYS[2]  attempt record of the acquire that took them
-- ARGV[1]  n
-- ARGV[2]  channel to publish on
-- ARGV[3]  how long to remember the release, in ms
--
-- Returns 1 when the permits were returned, 0 when this permit was already released or given
-- back (a retry after a lost reply: nothing is returned twice).

local state = redis.call('GET', KEYS[2])
if state == 'released' or state == 'given back' then
    return 0
end
redis.call('INCRBY', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], 'released', 'PX', ARGV[3])
redis.call('PUBLISH', ARGV[2], ARGV[1])
return 1
