-- lock_renew: extend many watchdog-held locks at once (the watchdog's batch convention).
--
-- KEYS[i]  lock hash of hold i (one key per hold)
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  keys per hold (1)
-- ARGV[3]  arguments per hold (2)
-- ARGV[4 + 2(i-1)], ARGV[5 + 2(i-1)]  owner id and fencing token of hold i
--
-- Returns an array with, for each hold, 1 if it is still ours (its expiry is now at least the
-- lease; a longer fixed lease of a re-entry is kept) or 0 if it is gone or someone else's.
-- A key holding foreign data counts as gone for its hold only, so it cannot stall the renewal
-- of the other holds in the batch.

local lease = tonumber(ARGV[1])
local results = {}
for i, key in ipairs(KEYS) do
    local at = 4 + (i - 1) * tonumber(ARGV[3])
    local holder = redis.pcall('HMGET', key, 'owner', 'token')
    if holder.err == nil and holder[1] == ARGV[at] and holder[2] == ARGV[at + 1] then
        if redis.call('PTTL', key) < lease then
            redis.call('PEXPIRE', key, lease)
        end
        results[i] = 1
    else
        results[i] = 0
    end
end
return results
