-- latch_prelude: the latch layout and its reader, prepended to every latch script that reads
-- the latch, so the layout logic lives once. Not an operation of its own.
--
-- Layout: one hash, present only while the latch is closed (armed):
--   count  = how many count-downs are still needed (>= 1)
--   arming = an id unique to the try_set_count that armed it; a waiter that saw one arming
--            knows the latch opened for it when it later finds another (re-armed since)
-- An absent key is an open latch (count 0). Anything else under the key is foreign data.

-- Returns the count (a string) and arming of the latch at `key`, or nil when it is open.
-- Raises WRONGTYPE for foreign data.
local function read_latch(key)
    local fields = redis.call('HMGET', key, 'count', 'arming')
    if fields[1] and fields[2] and tonumber(fields[1]) then
        return fields[1], fields[2]
    end
    if redis.call('EXISTS', key) == 1 then
        error({err = 'WRONGTYPE the latch key holds foreign data'})
    end
    return nil
end

