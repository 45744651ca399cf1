-- latch_status: read the count and arming of a latch (read-only).
--
-- KEYS[1]  latch hash (see latch_prelude)
--
-- Returns {count, arming} while the latch is closed, {'0', ''} when it is open.

local count, arming = read_latch(KEYS[1])
if count then
    return {count, arming}
end
return {'0', ''}
