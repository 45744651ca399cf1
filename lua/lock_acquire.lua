-- lock_acquire: take a lock, or re-enter it if the caller already holds it. (Prefixed with
-- publish_prelude.lua, clock_prelude.lua, lock_prelude.lua, wake_prelude.lua and
-- lock_hand_over_prelude.lua.)
--
-- KEYS[1]  lock hash (layout in lock_prelude)
-- KEYS[2]  fence       counter of fencing tokens; never expires, never deleted
-- KEYS[3]  attempt record of this attempt; exists only if the attempt was already given back
--          (lock_release ran for it first: its caller gave up), so it must not grant
-- KEYS[4]  waiting clients (see wake_prelude)
-- KEYS[5]  hand-over offers (see lock_hand_over_prelude); optional, see below
-- ARGV[1]  owner id of the caller
-- ARGV[2]  lease in milliseconds
-- ARGV[3]  attempt id, unique per acquire request
-- ARGV[4]  wake-up channel of the caller's client for this lock
-- ARGV[5]  how long the client's registration as a waiter lasts, in ms; 0 = never register
--          (the caller will not wait, try_lock, or this is its first try, made before it
--          subscribed: a wake-up would reach nobody)
-- ARGV[6]  what a grant does with the client's registration: '0' nothing (not registered,
--          and no other task of the client waits), '1' take it out (an earlier attempt may
--          have registered it, and no other task waits), '2' keep it, at the back (clients
--          take turns), unless ARGV[5] is 0: other tasks of the client wait behind the
--          caller, and the next wake-up is theirs
-- ARGV[7]  if the caller must wait and offers to take the lock in its wake-up,
--          '<lease ms> <stands ms>': the hand-over lease it asks for (its watchdog
--          lengthens that short lease, or, waiting with a fixed lease, its next attempt
--          takes the hold over) and how long its offer stands (the client asks again within
--          that time while it waits); '0': it does not offer
-- ARGV[8]  earlier attempts of the client's waiting tasks that offered and whose hand-over the
--          client has not taken (attempt ids separated by spaces; '' none): a hold handed
--          over to one of them is taken over by this attempt. Only the waiting head of the
--          client's tasks names them: a hand-over belongs to the wait that offered
--
-- KEYS[5] and ARGV[4..8] are optional, all together: a call without them is one with
-- ARGV[5] = 0, ARGV[6] = '0', ARGV[7] = '0' and ARGV[8] = '' (no registration, no offer,
-- nothing to take over), which reads neither KEYS[5] nor ARGV[4]. A first try is such a
-- call, and sends 7 keys and arguments instead of 13: Redis spends time on each one sent.
--
-- Returns the fencing token (an integer, not a table) when acquired (a re-entry keeps the
-- token of the hold it enters), {0, pttl} when the caller must wait (pttl is the holder's
-- remaining lease in ms, -1 if it has none; the client is registered, so the release wakes it
-- when its turn comes), or {-1} when the attempt was given back before it ran. A grant
-- answers with a plain integer: a table reply measured about 2 µs more of Redis's time per
-- call.
-- A re-entry never shortens the hold (see reenter).

local registration_ms = ARGV[5] or '0'
local on_grant = ARGV[6] or '0'
local hand_over_ms = ARGV[7] or '0'
local offered = ARGV[8] or ''

local holder, waiting = holder_and_waiting(KEYS[1], KEYS[3], KEYS[4])
if holder == false then
    return {-1}
end
-- The common case: the lock is free, and the grant leaves the client's registration as it
-- is (none: no task of the client waits).
if not holder and on_grant == '0' then
    return grant(KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3], waiting)
end

-- @uncommon: the lock is held (by the caller, who re-enters, or by another owner: the caller
-- waits, or takes over a hold handed over to its client), or the grant changes the client's
-- registration. The prelude functions only these paths call are defined here, so a call that
-- returned above never makes them (see `script::arrange` in redisync-core).

-- The client stays registered if it is granted while other tasks of it wait: registering it
-- for them here spares the next of them a request of its own before it waits.
local requeue = on_grant == '2' and registration_ms ~= '0'
local taken = holder and offered ~= '' and take_over(KEYS[1], offered, ARGV[1], ARGV[2], ARGV[3])
local token
if taken then
    token = taken
elseif not holder then
    token = grant(KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3], waiting or requeue)
elseif holder[1] == ARGV[1] then
    token = tonumber(holder[2])
    reenter(KEYS[1], ARGV[2], ARGV[3])
    if requeue then
        redis.call('HSET', KEYS[1], 'w', '1')
    end
else
    if registration_ms ~= '0' then
        add_to_registry(KEYS[4], ARGV[4], registration_ms)
        redis.call('HSET', KEYS[1], 'w', '1')
        local offer = hand_over_ms ~= '0' and ARGV[1] .. ' ' .. ARGV[3] .. ' ' .. hand_over_ms
        offer_hand_over(KEYS[5], ARGV[4], offer, registration_ms)
    end
    return {0, redis.call('PTTL', KEYS[1])}
end
-- Got it. The client waits no more, unless other tasks of it wait; an offer an earlier
-- attempt made is moot either way (the next task to wait makes its own).
if on_grant == '1' then
    remove_from_registry(KEYS[4], ARGV[4])
elseif requeue then
    requeue_in_registry(KEYS[4], ARGV[4], registration_ms)
end
if on_grant ~= '0' then
    offer_hand_over(KEYS[5], ARGV[4], false)
end
return token
