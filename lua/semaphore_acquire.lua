-- semaphore_acquire: take n permits at once, or none. (Prefixed with publish_prelude.lua,
-- wake_prelude.lua, semaphore_wake_prelude.lua and semaphore_prelude.lua.)
--
-- KEYS[1]  permits
-- KEYS[2]  attempt record of this attempt: 'granted:<generation>' from here until the permits
--          are released, given back or forgotten (no expiry: the permits are outstanding that
--          long); if it already exists the attempt was given back before it ran
-- KEYS[3]  generation
-- KEYS[4]  waiters (see wake_prelude.lua); optional, see below
-- ARGV[1]  n, the permits to take (>= 1)
-- ARGV[2]  the client's wake-up channel, '' for a first try (see after_attempt)
-- ARGV[3]  '1' if more tasks of the client wait, '0' otherwise (see after_attempt)
-- ARGV[4]  how long the waiters registry lasts at least, in ms
--
-- KEYS[4] and ARGV[2..4] are optional, all together: a call without them is a first try
-- (ARGV[2] = ''), which reads none of them. Redis spends time on each key and argument sent.
--
-- Returns 1 when the n permits were taken, 2 when they were taken by a client that stays
-- registered for its other waiting tasks (ARGV[3] is '1') and fewer than n permits are left
-- (the next of its tasks to ask for n cannot get in before permits come back, which wakes a
-- client), 0 when fewer than n are available (nothing taken; a waiting client is
-- registered), -1 when the attempt had been given back before it ran; a WRONGTYPE error
-- when the keys hold foreign data.

local channel = ARGV[2] or ''
local available, generation, state = read_semaphore(KEYS[1], KEYS[3], KEYS[2])
if state then
    return -1
end
-- Written as the refusal's negation: a count that is not a number (foreign data) still takes
-- the grant's path, whose DECRBY reports it.
local granted = available and not (available < tonumber(ARGV[1]))
local left
if granted then
    left = redis.call('DECRBY', KEYS[1], ARGV[1])
    redis.call('SET', KEYS[2], 'granted:' .. generation)
    -- A first try leaves the registry of waiting clients alone (see after_attempt).
    if channel == '' then
        return 1
    end
end

-- @uncommon: the permits asked for are not free, or the caller waits. The prelude functions
-- only these paths call are defined here, so a call that returned above never makes them
-- (see `script::arrange` in redisync-core).
after_attempt(KEYS[4], channel, ARGV[3], ARGV[4], granted)
if not granted then
    return 0
end
if ARGV[3] == '1' and left < tonumber(ARGV[1]) then
    return 2
end
return 1
