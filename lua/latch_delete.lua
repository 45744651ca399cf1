-- latch_delete: remove the latch, which opens it: every waiter returns.
--
-- KEYS[1]  latch hash (see latch_prelude)
-- ARGV[1]  channel to publish on
--
-- Returns 1 if the latch was armed, 0 if it was open already (nothing changed).

if read_latch(KEYS[1]) then
    redis.call('DEL', KEYS[1])
    redis.call('PUBLISH', ARGV[1], 'opened')
    return 1
end
return 0
