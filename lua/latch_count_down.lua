-- latch_count_down: count the latch down by one; at zero it opens and wakes every waiter.
-- Applied once however often it is retried.
--
-- KEYS[1]  latch hash (see latch_prelude)
-- KEYS[2]  request record: the result of this count-down's first run, so that a retry after a
--          lost reply returns it instead of counting down twice
-- ARGV[1]  channel to publish on when the latch opens
-- ARGV[2]  how long to keep the request record, in ms, from the latest run of this request
--
-- Returns 1 when this count-down opened the latch, 0 when the latch is still closed, -1 when
-- it was open already (nothing changed: the count never goes below zero).

local recorded = redis.call('GET', KEYS[2])
if recorded then
    -- A retry: the client has not seen a reply yet and may send more, so the record must
    -- outlive those too.
    redis.call('PEXPIRE', KEYS[2], ARGV[2])
    return tonumber(recorded)
end
local result = -1
if read_latch(KEYS[1]) then
    result = 0
    if redis.call('HINCRBY', KEYS[1], 'count', -1) <= 0 then
        redis.call('DEL', KEYS[1])
        redis.call('PUBLISH', ARGV[1], 'opened')
        result = 1
    end
end
redis.call('SET', KEYS[2], result, 'PX', ARGV[2])
return result
