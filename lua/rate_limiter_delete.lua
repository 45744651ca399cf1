-- rate_limiter_delete: remove the limiter's rate and state, and wake its waiters (who then find
-- no rate and fail). (Prefixed with publish_prelude.lua.)
--
-- KEYS[1]  config hash (see rate_limiter_prelude)
-- KEYS[2]  state hash
-- ARGV[1]  channel to publish on
--
-- Returns 1 if a rate was set, 0 if not.

local existed = redis.call('EXISTS', KEYS[1])
redis.call('DEL', KEYS[1], KEYS[2])
publish(ARGV[1], 'deleted')
return existed
