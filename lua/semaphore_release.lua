-- semaphore_release: give back the n permits a permit object holds. Safe to repeat any number
-- of times, at any later point: only a 'granted' record returns permits, and it stops being
-- 'granted' the first time. (So the client can retry a release until Redis confirms it.)
-- (Prefixed with semaphore_prelude.lua.)
--
-- KEYS[1]  permits
-- KEYS[2]  attempt record of the acquire that took them
-- KEYS[3]  generation
-- ARGV[1]  n
-- ARGV[2]  channel to publish on
-- ARGV[3]  how long to keep the 'released' record, in ms
--
-- Returns 1 when the permits were outstanding and are given back now, 0 when there was nothing
-- to give back (already released or forgotten). Permits go back only to the generation they
-- were taken from: a semaphore deleted meanwhile stays deleted, one created anew is not
-- inflated; either way the record stops being 'granted'.

local generation = taken_from(redis.call('GET', KEYS[2]))
if not generation then
    return 0
end
give_permits_back(KEYS[1], KEYS[3], generation, ARGV[1], ARGV[2])
redis.call('SET', KEYS[2], 'released', 'PX', ARGV[3])
return 1
