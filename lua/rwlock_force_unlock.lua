-- rwlock_force_unlock: free the lock whatever holds it (readers and writer), tell the holders
-- and wake waiters. (Prefixed with publish_prelude.lua and rwlock_prelude.lua.)
--
-- KEYS[1]  lock hash
-- KEYS[2]  readers
-- ARGV[1]  channel to publish on
-- ARGV[2]  drain channel: clients whose local readers share a read hold hear that it is gone
-- ARGV[3]  lost-notice channel prefix: the holders' clients hear at once that their holds are
--          gone (see publish_lost); '' for none
--
-- Returns 1 if the lock was held, 0 if it was free. Waiting writers keep their marks, and the
-- fencing counter is kept, so tokens never repeat.

check_rwlock_keys(KEYS[1], KEYS[2])
local shared = redis.call('HGET', KEYS[1], 'sh')
local taken = holders(KEYS[1], KEYS[2])
if redis.call('DEL', KEYS[1], KEYS[2]) > 0 then
    publish_lost(ARGV[3], taken)
    publish(ARGV[1], 'released')
    if shared then
        publish(ARGV[2], 'released')
    end
    return 1
end
return 0
