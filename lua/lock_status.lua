-- lock_status: read a lock's state as seen by one owner (read-only).
--
-- KEYS[1]  lock hash
-- ARGV[1]  owner id asking
--
-- Returns {pttl, count}: pttl is -2 when the lock is free, otherwise its remaining lease in ms
-- (-1 if it has none); count is the asking owner's hold count (0 if it does not hold it).

local pttl = redis.call('PTTL', KEYS[1])
if pttl == -2 then
    return {-2, 0}
end
local h = redis.call('HMGET', KEYS[1], 'owner', 'count')
local owner, count = h[1], h[2]
if owner == ARGV[1] then
    return {pttl, tonumber(count)}
end
return {pttl, 0}
