-- latch_count_down: count the latch down by one; at zero it opens and wakes every waiter.
-- Applied once however often it is retried: the latch remembers the count-downs applied to its
-- arming (see latch_prelude.lua), for as long as it is armed and for a while after it opened.
-- (Prefixed with publish_prelude.lua and latch_prelude.lua.)
--
-- KEYS[1]  latch hash (see latch_prelude)
-- KEYS[2]  opened: the count-downs of the arming that opened last
-- KEYS[3]  waiters (see wake_prelude.lua)
-- ARGV[1]  request id of this count-down (the same for its retries)
-- ARGV[2]  how long an opened arming's count-downs are remembered, in ms
-- ARGV[3]  channel to publish on when the latch opens
--
-- Returns 1 when this count-down opened the latch, 0 when the latch is still closed, -1 when
-- it was open already (nothing changed: the count never goes below zero). A retry of a
-- count-down that was applied gets its first answer.

local count, _, recorded, prior = read_latch(KEYS[1], ARGV[1])
if recorded then
    return tonumber(recorded)
end
if not count or prior == '1' then
    -- A retry of a count-down applied to the arming that opened last answers as it did.
    local opened = redis.call('HGET', KEYS[2], ARGV[1])
    if opened then
        return tonumber(opened)
    end
    if not count then
        return -1
    end
end
if redis.call('HINCRBY', KEYS[1], 'count', '-1') > 0 then
    redis.call('HSET', KEYS[1], ARGV[1], '0')
    return 0
end
redis.call('HSET', KEYS[1], ARGV[1], '1')
open_latch(KEYS[1], KEYS[2], ARGV[2], KEYS[3], ARGV[3])
return 1
