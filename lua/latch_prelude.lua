-- latch_prelude: the latch layout, its reader and its opening, prepended to every latch script
-- that reads the latch (after wake_prelude.lua where a script registers waiters), so the
-- layout logic lives once. Not an operation of its own.
--
-- Layout:
--   latch     hash, present only while the latch is closed (armed):
--               count     = how many count-downs are still needed (>= 1)
--               arming    = an id unique to the try_set_count that armed it; a waiter that saw
--                           one arming knows the latch opened for it when it later finds
--                           another (re-armed since)
--               <request> = one field per count-down applied to this arming, its outcome ('0'),
--                           so that a retry after a lost reply is not applied twice
--               prior     = '1' when the latch was armed while an earlier arming's count-downs
--                           were still remembered (`opened` below), '0' otherwise: after a
--                           '1', a count-down looks there too before it applies, since it may
--                           be a retry of one applied to that arming
--             An absent key is an open latch (count 0). Anything else under the key is
--             foreign data.
--   opened    hash: the latch hash of the arming that opened last, renamed when it opened and
--             kept for a while (expiring), so that a count-down applied to it and retried
--             after the opening is recognised ('1' for the one that opened it)
--   waiters   sorted set: the clients with tasks waiting (see wake_prelude.lua), so that an
--             opening publishes only when somebody waits

-- Returns the count (a string) and arming of the latch at `key`, or nil when it is open;
-- with `request`, also that request's outcome and the `prior` field, read in the same
-- HMGET. Raises WRONGTYPE for foreign data.
local function read_latch(key, request)
    local fields
    if request then
        fields = redis.call('HMGET', key, 'count', 'arming', request, 'prior')
    else
        fields = redis.call('HMGET', key, 'count', 'arming')
    end
    local count, arming, outcome, prior = fields[1], fields[2], fields[3], fields[4]
    if count and arming and tonumber(count) then
        return count, arming, outcome, prior
    end
    if redis.call('EXISTS', key) == 1 then
        error({err = 'WRONGTYPE the latch key holds foreign data'})
    end
    return nil
end

-- Opens the armed latch at `key`: its hash becomes `opened`, kept `keep_ms`, and the waiting
-- clients are woken with one message on `channel`, if there are any.
local function open_latch(key, opened, keep_ms, waiters, channel)
    redis.call('RENAME', key, opened)
    redis.call('PEXPIRE', opened, keep_ms)
    if redis.call('DEL', waiters) == 1 then
        publish(channel, 'opened')
    end
end

