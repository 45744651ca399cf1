-- latch_delete: remove the latch, which opens it: every waiter returns. The count-downs applied
-- to it are remembered as for an opening, so that their retries change nothing. (Prefixed with
-- publish_prelude.lua and latch_prelude.lua.)
--
-- KEYS[1]  latch hash (see latch_prelude)
-- KEYS[2]  opened: the count-downs of the arming that opened last
-- KEYS[3]  waiters (see wake_prelude.lua)
-- ARGV[1]  how long an opened arming's count-downs are remembered, in ms
-- ARGV[2]  channel to publish on
--
-- Returns 1 if the latch was armed, 0 if it was open already (nothing changed).

if read_latch(KEYS[1]) then
    open_latch(KEYS[1], KEYS[2], ARGV[1], KEYS[3], ARGV[2])
    return 1
end
return 0
