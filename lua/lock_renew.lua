-- lock_renew: extend many watchdog-held locks at once (the watchdog's batch convention).
--
-- KEYS[i]  lock hash of hold i (one key per hold)
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  keys per hold (1)
-- ARGV[3]  arguments per hold (3)
-- ARGV[4 + 3(i-1)] .. ARGV[6 + 3(i-1)]  owner id, fencing token and attempt id of hold i
--
-- Returns an array with, for each hold, 1 if it is still ours (its expiry is now at least the
-- lease; a longer fixed lease of a re-entry is kept), -1 - <ms left> if it is still ours but
-- its lease was fixed (lock_set_lease ran after this renewal was sent): nothing is extended,
-- so the fixed lease stands, and the client learns when it ends; or 0 if it is gone or
-- someone else's. A key holding foreign data counts
-- as gone for its hold only, so it cannot stall the renewal of the other holds in the batch.

local results = {}
for i, key in ipairs(KEYS) do
    local at = 4 + (i - 1) * tonumber(ARGV[3])
    -- An error reply (foreign data under the key) is a table with `err`, and none of these.
    local h = redis.pcall('HMGET', key, 'owner', 'token', 'a:' .. ARGV[at + 2])
    local owner, token, hold = h[1], h[2], h[3]
    if h.err ~= nil or owner ~= ARGV[at] or token ~= ARGV[at + 1] or not hold then
        results[i] = 0
    elseif hold == 'fixed' then
        results[i] = -1 - math.max(redis.call('PTTL', key), 0)
    else
        redis.call('PEXPIRE', key, ARGV[1], 'GT')
        results[i] = 1
    end
end
return results
