-- expirable_semaphore_renew: extend many watchdog-held permits at once (the watchdog's batch
-- convention). (Prefixed with clock_prelude.lua and expirable_semaphore_prelude.lua.)
--
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  keys per hold (1)
-- ARGV[3]  arguments per hold (1)
-- KEYS[i]  deadlines of permit i
-- ARGV[3 + i]  id of permit i
--
-- Returns an array with, for each permit, 1 if it is still held (its lease now ends no sooner
-- than a full lease from now) or 0 if it expired or was released. Foreign data under one key
-- counts as gone for that permit only.

local now = now_ms()
local lease_end = now + tonumber(ARGV[1])
local lease_end_text = string.format('%d', lease_end)
local results = {}
for i, deadlines in ipairs(KEYS) do
    local ends = redis.pcall('ZSCORE', deadlines, ARGV[3 + i])
    if type(ends) == 'string' and tonumber(ends) > now then
        if tonumber(ends) < lease_end then
            redis.call('ZADD', deadlines, lease_end_text, ARGV[3 + i])
        end
        results[i] = 1
    else
        results[i] = 0
    end
end
return results
