-- rwlock_withdraw: an acquire call stops waiting (it gave up, failed or was cancelled): a
-- writer's mark goes, so new readers stop giving way to it (they are woken), and the call's
-- registration as a waiter goes, so releases stop publishing for it. (Prefixed with
-- publish_prelude.lua.)
--
-- KEYS[1]  waiting writers: sorted set <waiter id> -> when that mark lapses
-- KEYS[2]  waiter record: kept as long as a late attempt of this waiter could still run, so
--          one that Redis runs only after the withdrawal (it travelled on another connection)
--          cannot mark or register again (a writer's; a reader's late attempt undoes itself)
-- KEYS[3]  lock hash (see rwlock_prelude.lua: `w`, `w:<waiter>`); left alone if it holds
--          foreign data (the caller's acquire failed on it)
-- ARGV[1]  waiter id
-- ARGV[2]  channel to publish on
-- ARGV[3]  how long to keep the waiter record, in ms; 0 for none
--
-- Returns 1 if a writer's mark was there, 0 if not (already gone: granted, lapsed or
-- withdrawn, or the caller reads).

if tonumber(ARGV[3]) > 0 then
    redis.call('SET', KEYS[2], 1, 'PX', ARGV[3])
end
if redis.pcall('HDEL', KEYS[3], 'w:' .. ARGV[1]) == 1
    and redis.call('HINCRBY', KEYS[3], 'w', -1) <= 0 then
    redis.call('HDEL', KEYS[3], 'w')
end
if redis.call('ZREM', KEYS[1], ARGV[1]) == 1 then
    publish(ARGV[2], 'writer left')
    return 1
end
return 0
