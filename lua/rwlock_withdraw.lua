-- rwlock_withdraw: a writer stops waiting (it gave up, failed or was cancelled): remove its
-- mark so new readers stop giving way to it, and wake them.
--
-- KEYS[1]  waiting writers: sorted set <waiter id> -> when that mark lapses
-- KEYS[2]  waiter record: kept as long as a late attempt of this waiter could still run, so
--          one that Redis runs only after the withdrawal (it travelled on another connection)
--          cannot mark again
-- ARGV[1]  waiter id
-- ARGV[2]  channel to publish on
-- ARGV[3]  how long to keep the waiter record, in ms
--
-- Returns 1 if the mark was there, 0 if not (already gone: granted, lapsed or withdrawn).

redis.call('SET', KEYS[2], 1, 'PX', ARGV[3])
if redis.call('ZREM', KEYS[1], ARGV[1]) == 1 then
    redis.call('PUBLISH', ARGV[2], 'writer left')
    return 1
end
return 0
