-- lock_acquire_all: take (or re-enter) several locks at once, all or none. For a multi-lock
-- whose locks live on one server: one round trip, and no hold is ever taken while another
-- of the set is busy. (Prefixed with lock_prelude.lua.)
--
-- KEYS[4i-3], KEYS[4i-2], KEYS[4i-1], KEYS[4i]  lock hash, fence, attempt record and waiting
--          clients of lock i (as for lock_acquire); the locks are distinct
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  attempt id, unique per request (the same for every lock of the request)
-- ARGV[2 + i]  owner id of lock i
--
-- Returns {1, token_1, ..., token_n} when every lock was acquired (a re-entered lock keeps
-- the token of the hold it enters), {0, i, pttl} when lock i is held by another owner
-- (nothing was changed; pttl is its remaining lease in ms, -1 if it has none), or {-1} when
-- the request was given back before it ran.

local n = #KEYS / 4
local holders, waiting = {}, {}
for i = 1, n do
    holders[i], waiting[i] = holder_and_waiting(KEYS[4 * i - 3], KEYS[4 * i - 1], KEYS[4 * i])
    if holders[i] == false then
        return {-1}
    end
end
for i = 1, n do
    if holders[i] and holders[i][1] ~= ARGV[2 + i] then
        return {0, i, redis.call('PTTL', KEYS[4 * i - 3])}
    end
end
local reply = {1}
for i = 1, n do
    local hash = KEYS[4 * i - 3]
    if holders[i] then
        reenter(hash, ARGV[1], ARGV[2])
        reply[i + 1] = tonumber(holders[i][2])
    else
        reply[i + 1] = grant(hash, KEYS[4 * i - 2], ARGV[2 + i], ARGV[1], ARGV[2], waiting[i])
    end
end
return reply
