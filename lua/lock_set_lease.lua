-- lock_set_lease: give one hold of a lock a fixed lease from now on (its watchdog renewal
-- stops on the client).
--
-- KEYS[1]  lock hash (layout in lock_prelude)
-- ARGV[1]  owner id of the hold
-- ARGV[2]  its fencing token
-- ARGV[3]  lease in milliseconds
-- ARGV[4]  attempt id of the hold
--
-- Returns 1 when the lease was set, 0 when the hold is no longer ours (nothing changed).
-- The expiry becomes exactly the lease when this is the owner's only hold; with other holds
-- (re-entries) it is never shortened, since they may rely on it. The hold's attempt field
-- becomes 'fixed', so that a watchdog renewal of it still on the wire cannot extend the lock
-- past the fixed lease (see lock_renew).

local attempt_field = 'a:' .. ARGV[4]
local h = redis.call('HMGET', KEYS[1], 'owner', 'token', 'count', attempt_field)
local owner, token, count, hold = h[1], h[2], h[3], h[4]
if owner ~= ARGV[1] or token ~= ARGV[2] or not hold then
    return 0
end
redis.call('HSET', KEYS[1], attempt_field, 'fixed')
if tonumber(count) == 1 or redis.call('PTTL', KEYS[1]) < tonumber(ARGV[3]) then
    redis.call('PEXPIRE', KEYS[1], ARGV[3])
end
return 1
