-- expirable_semaphore_release: return a permit by id. Keeps no record: a repeat finds the
-- permit gone and answers 0, and nothing is ever returned twice. (Prefixed with
-- publish_prelude.lua, clock_prelude.lua, wake_prelude.lua, semaphore_wake_prelude.lua and
-- expirable_semaphore_prelude.lua.)
--
-- KEYS[1]  permits
-- KEYS[2]  deadlines
-- KEYS[3]  waiters (see wake_prelude.lua)
-- ARGV[1]  permit id
--
-- Returns 1 when the permit was held and is returned now, 0 when it was unknown, returned
-- already, or its lease had ended (such a permit goes back to the pool now, as it would have
-- anyway). A returned permit wakes one waiting client. The caller tells a repeat's 0 from a
-- stale release's (see Client::eval_until_confirmed).

local ends = redis.call('ZSCORE', KEYS[2], ARGV[1])
if not ends then
    -- Nothing to return, but foreign data under the pool is still reported.
    pool(KEYS[1])
    return 0
end
-- INCR first: on foreign data it fails before anything changed.
local available = redis.call('INCR', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
wake_waiters(KEYS[3], 1, available)
if tonumber(ends) > now_ms() then
    return 1
end
return 0
