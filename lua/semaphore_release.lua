-- semaphore_release: give back the n permits a permit object holds. Safe to repeat any number
-- of times, at any later point: only a 'granted' record returns permits, and the first release
-- deletes it, so a repeat finds nothing to give back. (So the client can retry a release until
-- Redis confirms it, and Redis keeps nothing per release.) (Prefixed with publish_prelude.lua,
-- wake_prelude.lua, semaphore_wake_prelude.lua and semaphore_prelude.lua.)
--
-- KEYS[1]  permits
-- KEYS[2]  attempt record of the acquire that took them
-- KEYS[3]  generation
-- KEYS[4]  waiters (see wake_prelude.lua)
-- ARGV[1]  n
--
-- Returns 1 when the permits were outstanding and are given back now (one waiting client is
-- woken per permit, as far as there are any), 0 when there was nothing to give back (already
-- released or forgotten). Permits go back only to the generation they were taken from: a
-- semaphore deleted meanwhile stays deleted, one created anew is not inflated; either way
-- the record is gone.

local available, current, state = read_semaphore(KEYS[1], KEYS[3], KEYS[2])
local generation = taken_from(state)
if not generation then
    return 0
end
redis.call('DEL', KEYS[2])
local freed, now_available = return_permits(KEYS[1], available, current, generation, ARGV[1])
wake_waiters(KEYS[4], freed, now_available)
return 1
