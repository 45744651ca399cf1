-- fair_lock_release: give back the hold one waiter got, if it got one, and take the waiter out
-- of the queue. (Prefixed with publish_prelude.lua, clock_prelude.lua, lock_prelude.lua and
-- fair_lock_prelude.lua.)
--
-- Used by unlock and by a dropped guard (with no record: ARGV[3] = 0), and by a waiter whose
-- caller went away, whether or not Redis has run its attempts yet (with a record).
--
-- KEYS[1]  lock hash (layout in lock_prelude)
-- KEYS[2]  queue of waiters, see fair_lock_prelude
-- KEYS[3]  waiter deadlines, see fair_lock_prelude
-- KEYS[4]  attempt record: the result of the first release of this waiter, so that a repeat
--          gets the same answer; its existence also forbids a late attempt of this waiter
--          from granting or queueing (see fair_lock_acquire). Only read or written when
--          ARGV[3] > 0.
-- ARGV[1]  waiter id whose hold (and place) to give back
-- ARGV[2]  wake-up channel prefix of waiters
-- ARGV[3]  how long to keep the attempt record, in ms; 0 = keep none (see lock_release)
--
-- KEYS[4] and ARGV[3] are optional, together: a call without them keeps no record (a guard's
-- release; see lock_release).
--
-- Returns 1 when the lock became free, 0 when the hold was given back and the owner still
-- holds the lock through other holds, -1 when the waiter holds nothing. Whenever the lock is
-- free afterwards, the head waiter is woken (also when a woken waiter gives up: the next one
-- must not sleep on).

local remember_ms = ARGV[3] or '0'
local recorded = recorded_outcome(KEYS[4], remember_ms)
if recorded then
    return tonumber(recorded)
end
-- Without a queue there is nobody to tidy away, no place to leave and nobody to wake (see
-- fair_lock_acquire).
if redis.call('EXISTS', KEYS[2], KEYS[3]) == 0 then
    local result = release_hold(KEYS[1], ARGV[1])
    record_outcome(KEYS[4], remember_ms, result)
    return result
end

-- @uncommon: waiters queue. The prelude functions only this path calls are defined here, so
-- a release that returned above never makes them (see `script::arrange` in redisync-core).
tidy_queue(KEYS[2], KEYS[3], now_ms())
local result = release_hold(KEYS[1], ARGV[1])
leave_queue(KEYS[2], KEYS[3], ARGV[1])
if result == 1 or redis.call('EXISTS', KEYS[1]) == 0 then
    wake_head(KEYS[2], ARGV[2])
end
record_outcome(KEYS[4], remember_ms, result)
return result
