-- fair_lock_acquire: take a fair lock in arrival order, or re-enter it if the caller already
-- holds it. (Prefixed with publish_prelude.lua, lock_prelude.lua and fair_lock_prelude.lua.)
--
-- KEYS[1]  lock hash (layout in lock_prelude)
-- KEYS[2]  fence       counter of fencing tokens; never expires, never deleted
-- KEYS[3]  attempt record of this waiter; exists only if the waiter was already given back
--          (fair_lock_release ran for it first: its caller gave up), so it must not grant
-- KEYS[4]  queue of waiters, see fair_lock_prelude
-- KEYS[5]  waiter deadlines, see fair_lock_prelude
-- ARGV[1]  owner id of the caller
-- ARGV[2]  lease in milliseconds
-- ARGV[3]  waiter id: unique per acquire call, the same for all its attempts
-- ARGV[4]  how long the caller keeps its place in the queue without another attempt, in ms;
--          0 = take the lock only if nobody waits, never queue (try_lock)
-- ARGV[5]  wake-up channel prefix of waiters
--
-- Returns the fencing token (an integer, not a table) when acquired (a re-entry keeps the
-- token of the hold it enters), {0, pttl} when the caller must wait (pttl is the holder's
-- remaining lease in ms; -1 if it has none, -2 if the lock is free but another waiter goes
-- first), or {-1} when the waiter was given back before this attempt ran. A grant answers
-- with a plain integer: a table reply measured about 2 µs more of Redis's time per call.
-- A re-entry never shortens the hold (see reenter) and never queues: the caller holds the
-- lock already.

-- The common case, a free lock, a waiter never given back and nobody queued, in one EXISTS;
-- only when it finds a key does a second one tell the queue's keys from the other two.
local holder, queued = holder_and_waiting(KEYS[1], KEYS[3], KEYS[4], KEYS[5])
if holder == false then
    return {-1}
end
-- Without a queue (the case of every uncontended lock) nobody is to be tidied away, no head
-- goes first and there is no place to leave: the grant then costs what the plain lock's does.
-- Either key alone counts, so that leftovers and foreign data are still tidied or reported.
if not holder and not queued then
    return grant(KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3])
end

-- @uncommon: the lock is held (by the caller, who re-enters, or by another owner) or waiters
-- queue. The prelude functions only these paths call are defined here, so a call that
-- returned above never makes them (see `script::arrange` in redisync-core).
local now
local tidied = false
if queued then
    now = now_us()
    if tonumber(ARGV[4]) > 0 then
        -- The caller is alive right now: its heartbeat counts before anyone is judged dead, so
        -- a stall of Redis itself cannot cost a live waiter its place.
        local alive_until = string.format('%d', math.floor(now / 1000) + tonumber(ARGV[4]))
        redis.call('ZADD', KEYS[5], 'XX', alive_until, ARGV[3])
    end
    tidied = tidy_queue(KEYS[4], KEYS[5], math.floor(now / 1000))
end
if holder and holder[1] == ARGV[1] then
    reenter(KEYS[1], ARGV[2], ARGV[3])
    if queued then
        leave_queue(KEYS[4], KEYS[5], ARGV[3])
    end
    return tonumber(holder[2])
end
if not holder then
    local head = queued and head_waiter(KEYS[4])
    if not head or head == ARGV[3] then
        local token = grant(KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3])
        if queued then
            leave_queue(KEYS[4], KEYS[5], ARGV[3])
        end
        return token
    end
    -- Free, but it is the head's turn. The release that freed the lock woke the head, and a
    -- lease that ran out is the head's own to notice (it asks again by the end it last saw,
    -- and at least every heartbeat); only a head that tidying brought forward just now may
    -- not know, so the head is woken when tidying removed waiters (the head among them or
    -- not: dead waiters are rare). Waking it on every such attempt would publish about 0.8
    -- extra messages per hand-off under contention: the releasing task's next acquire usually
    -- lands here.
    if tidied then
        wake_head(KEYS[4], ARGV[5])
    end
end
if tonumber(ARGV[4]) > 0 then
    join_queue(KEYS[4], KEYS[5], ARGV[3], now or now_us(), tonumber(ARGV[4]))
end
return {0, redis.call('PTTL', KEYS[1])}
