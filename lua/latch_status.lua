-- latch_status: read the count and arming of a latch (read-only): a waiter's first look, and
-- count(). (Prefixed with publish_prelude.lua and latch_prelude.lua.)
--
-- KEYS[1]  latch hash (see latch_prelude)
--
-- Returns {count, arming} while the latch is closed, {'0', ''} when it is open. Where a latch
-- is open, one EXISTS answers.

if redis.call('EXISTS', KEYS[1]) == 0 then
    return {'0', ''}
end
local count, arming = read_latch(KEYS[1])
return {count, arming}
