-- latch_wait: read the count and arming of a latch, as latch_status does, for a waiter that is
-- subscribed to the latch's channel: while the latch is still armed with the arming it waits
-- on, its client is registered among the waiters, so that the opening publishes. (Prefixed with
-- publish_prelude.lua, wake_prelude.lua and latch_prelude.lua.)
--
-- KEYS[1]  latch hash (see latch_prelude)
-- KEYS[2]  waiters (see wake_prelude.lua)
-- ARGV[1]  the client's entry among the waiters (its id)
-- ARGV[2]  how long the waiters registry lasts at least, in ms
-- ARGV[3]  the arming the waiter waits on ('' if it has not seen one)
--
-- Returns {count, arming} while the latch is closed, {'0', ''} when it is open.

local count, arming = read_latch(KEYS[1])
if not count then
    return {'0', ''}
end
if ARGV[3] == '' or ARGV[3] == arming then
    add_to_registry(KEYS[2], ARGV[1], ARGV[2])
end
return {count, arming}
