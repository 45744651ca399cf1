-- lock_release: give back the hold one acquire attempt got, if it got one. (Prefixed with
-- publish_prelude.lua, clock_prelude.lua, lock_prelude.lua, wake_prelude.lua and
-- lock_hand_over_prelude.lua.)
--
-- Used by unlock and by a dropped guard (with no record: ARGV[2] = 0), and by an acquire whose
-- caller went away, whether or not Redis has run that acquire yet (with a record).
--
-- KEYS[1]  lock hash (layout in lock_prelude)
-- KEYS[2]  waiting clients (see wake_prelude)
-- KEYS[3]  hand-over offers (see lock_hand_over_prelude)
-- KEYS[4]  fence: the counter of fencing tokens, for a hand-over's grant
-- KEYS[5]  attempt record: the result of the first release of this attempt, so that a repeat
--          gets the same answer; its existence also forbids a late acquire of this attempt
--          from granting (see lock_acquire). Only read or written when ARGV[2] > 0.
-- ARGV[1]  attempt id whose hold to give back
-- ARGV[2]  how long to keep the attempt record, in ms; 0 = keep none. A guard's release needs
--          none: its acquire was answered, so no late acquire of the attempt exists, and the
--          client judges a repeat that finds nothing (see Confirmed in redisync-core). So the
--          hot path leaves nothing in Redis, whatever the rate of releases.
--
-- KEYS[5] and ARGV[2] are optional, together: a call without them keeps no record. A guard's
-- release is such a call, and sends 5 keys and arguments instead of 7: Redis spends time on
-- each one sent.
--
-- Returns 1 when the lock became free (the client that has waited longest is woken, or handed
-- the lock, if any may wait: the hash says so, see lock_prelude), 0 when the hold was given
-- back and the owner still holds the lock through other holds, -1 when the attempt holds
-- nothing (its hold expired or was force-unlocked, it never got one, or this is a repeat of a
-- release without a record).

local remember_ms = ARGV[2] or '0'
local recorded = recorded_outcome(KEYS[5], remember_ms)
if recorded then
    return tonumber(recorded)
end
local result, waiting = release_hold(KEYS[1], ARGV[1])
if not waiting then
    record_outcome(KEYS[5], remember_ms, result)
    return result
end

-- @uncommon: the release freed the lock, and clients may wait for it. The prelude functions
-- only this path calls are defined here, so a release that returned above never makes them
-- (see `script::arrange` in redisync-core).
hand_over_or_wake(KEYS[2], KEYS[3], KEYS[1], KEYS[4], 16)
record_outcome(KEYS[5], remember_ms, result)
return result
