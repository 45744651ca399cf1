-- rwlock_renew: extend many watchdog-held read and write holds at once (the watchdog's batch
-- convention). (Prefixed with clock_prelude.lua and rwlock_prelude.lua.)
--
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  keys per hold (2)
-- ARGV[3]  arguments per hold (1)
-- KEYS[2i-1], KEYS[2i]  lock hash and readers of hold i
-- ARGV[3 + i]  attempt id of hold i
--
-- Returns an array with, for each hold, 1 if it is still live (its lease now ends no sooner
-- than a full lease from now) or 0 if it is gone. A key holding foreign data counts as gone
-- for its hold only.

local now = now_ms()
local renewed_end = now + tonumber(ARGV[1])
-- Sent as text: Redis 7.0 turns a number argument into text with a costly floating-point
-- format.
local renewed_text = string.format('%d', renewed_end)
local per_hold = tonumber(ARGV[2])
local results = {}
for i = 1, #KEYS / per_hold do
    local hash, readers = KEYS[(i - 1) * per_hold + 1], KEYS[(i - 1) * per_hold + 2]
    local attempt = ARGV[3 + i]
    -- An error reply (foreign data under the hash) is a table with `err`, and none of these.
    local h = redis.pcall('HMGET', hash, 'a:' .. attempt, 'wtoken', 'wexp', 'exp')
    local kind, wtoken, wexp, exp = h[1], h[2], h[3], h[4]
    local readers_type = redis.call('TYPE', readers)['ok']
    local live = 0
    if type(h) == 'table' and not h.err and kind
        and (readers_type == 'zset' or readers_type == 'none') then
        local fields = {}
        if string.sub(kind, 1, 1) == 'r' then
            local ends = redis.call('ZSCORE', readers, attempt)
            if ends and tonumber(ends) > now then
                if tonumber(ends) < renewed_end then
                    redis.call('ZADD', readers, 'XX', renewed_text, attempt)
                end
                live = 1
            end
        elseif kind == 'w' .. (wtoken or '') and tonumber(wexp) > now then
            if tonumber(wexp) < renewed_end then
                fields = {'wexp', renewed_text}
            end
            live = 1
        end
        if live == 1 and renewed_end > tonumber(exp or 0) then
            table.insert(fields, 'exp')
            table.insert(fields, renewed_text)
            expire_keys(hash, readers, renewed_text)
        end
        hset(hash, fields)
    end
    results[i] = live
end
return results
