-- expirable_semaphore_release: return a permit by id; idempotent. Also the give-back of an
-- acquire whose caller went away: its record then stops a late run of that acquire.
-- (Prefixed with expirable_semaphore_prelude.lua.)
--
-- KEYS[1]  permits
-- KEYS[2]  deadlines
-- KEYS[3]  record of this permit id: the outcome of its first release
-- ARGV[1]  permit id
-- ARGV[2]  channel to publish on
-- ARGV[3]  how long to keep the record, in ms
--
-- Returns 1 when the permit was returned, 0 when it was unknown or its lease had ended (it
-- is back in the pool already: nothing is returned twice). A retry gets the first answer.

local recorded = redis.call('GET', KEYS[3])
if recorded then
    return tonumber(recorded)
end
local now = now_ms()
reclaim(KEYS[1], KEYS[2], now, ARGV[2])
local result = 0
if redis.call('ZREM', KEYS[2], ARGV[1]) == 1 then
    redis.call('INCR', KEYS[1])
    redis.call('PUBLISH', ARGV[2], 1)
    result = 1
end
redis.call('SET', KEYS[3], result, 'PX', ARGV[3])
return result
