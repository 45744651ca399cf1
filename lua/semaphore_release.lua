-- semaphore_release: give back the n permits a permit object holds. Safe to repeat any number
-- of times, at any later point: only a 'granted' record returns permits, and it stops being
-- 'granted' the first time. (So the client can retry a release until Redis confirms it.)
--
-- KEYS[1]  permits
-- KEYS[2]  attempt record of the acquire that took them
-- ARGV[1]  n
-- ARGV[2]  channel to publish on
-- ARGV[3]  how long to keep the 'released' record, in ms
--
-- Returns 1 when the permits were given back, 0 when there was nothing to give back (already
-- released or forgotten). A semaphore deleted meanwhile stays deleted: the permits go nowhere.

if redis.call('GET', KEYS[2]) ~= 'granted' then
    return 0
end
if redis.call('EXISTS', KEYS[1]) == 1 then
    redis.call('INCRBY', KEYS[1], ARGV[1])
    redis.call('PUBLISH', ARGV[2], ARGV[1])
end
redis.call('SET', KEYS[2], 'released', 'PX', ARGV[3])
return 1
