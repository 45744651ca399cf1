-- rwlock_check_shared: what a client whose local readers share read holds must know after a
-- message on the drain channel (or once its subscription to it is confirmed): whether a writer
-- waits, and whether its shared holds are still there (read-only). (Prefixed with
-- clock_prelude.lua and rwlock_prelude.lua.)
--
-- KEYS[1]  readers        (see the prelude)
-- KEYS[2]  waiting writers
-- ARGV[i]  attempt id of the client's shared hold i
--
-- Returns {writer_waits, live_1, live_2, ...}: writer_waits is 1 if a writer's mark is live
-- (new readers must give way), live_i 1 if hold i is still a live read hold, else 0.

local now = now_ms()
local result = {0}
if redis.call('ZCOUNT', KEYS[2], '(' .. now, '+inf') > 0 then
    result[1] = 1
end
for i = 1, #ARGV do
    local ends = redis.call('ZSCORE', KEYS[1], ARGV[i])
    if ends and tonumber(ends) > now then
        result[i + 1] = 1
    else
        result[i + 1] = 0
    end
end
return result
