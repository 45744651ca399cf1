-- rwlock_status: how the lock is held right now (read-only). (Prefixed with clock_prelude.lua
-- and rwlock_prelude.lua.)
--
-- KEYS[1]  lock hash
-- KEYS[2]  readers
--
-- Returns {writer, readers}: 1 if a live write hold exists (else 0), and the number of live
-- read holds. Holds whose lease ended are not counted, even before a write prunes them.

check_rwlock_keys(KEYS[1], KEYS[2])
local now = now_ms()
local writer = 0
local wexp = redis.call('HGET', KEYS[1], 'wexp')
if wexp and tonumber(wexp) > now then
    writer = 1
end
return {writer, redis.call('ZCOUNT', KEYS[2], '(' .. now, '+inf')}
