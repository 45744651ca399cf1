-- election_renew: extend many watchdog-kept leaderships at once (the watchdog's batch
-- convention).
--
-- KEYS[i]  leader hash of hold i (one key per hold)
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  keys per hold (1)
-- ARGV[3]  arguments per hold (2)
-- ARGV[4 + 2(i-1)], ARGV[5 + 2(i-1)]  attempt id and term of hold i
--
-- Returns an array with, for each hold, 1 if it still leads (its expiry is now at least the
-- lease) or 0 if its leadership is gone. A key holding foreign data counts as gone for its
-- hold only, so it cannot stall the renewal of the other holds in the batch.

local results = {}
for i, key in ipairs(KEYS) do
    local at = 4 + (i - 1) * tonumber(ARGV[3])
    -- An error reply (foreign data under the key) is a table with `err`, and none of these.
    local h = redis.pcall('HMGET', key, 'owner', 'term')
    local owner, term = h[1], h[2]
    if h.err ~= nil or owner ~= ARGV[at] or term ~= ARGV[at + 1] then
        results[i] = 0
    else
        redis.call('PEXPIRE', key, ARGV[1], 'GT')
        results[i] = 1
    end
end
return results
