-- rwlock_delete: remove all state of the lock (holds and waiting-writer marks) and wake
-- waiters. The fencing counter is kept, so tokens never repeat. (Prefixed with
-- publish_prelude.lua and rwlock_prelude.lua.)
--
-- KEYS[1]  lock hash
-- KEYS[2]  readers
-- KEYS[3]  waiting writers
-- ARGV[1]  channel to publish on
-- ARGV[2]  drain channel: clients whose local readers share a read hold hear that it is gone
-- ARGV[3]  lost-notice channel prefix: the holders' clients hear at once that their holds are
--          gone (see publish_lost); '' for none
--
-- Returns 1 if there was anything to remove, 0 otherwise.

check_rwlock_keys(KEYS[1], KEYS[2], KEYS[3])
local shared = redis.call('HGET', KEYS[1], 'sh')
local taken = holders(KEYS[1], KEYS[2])
if redis.call('DEL', KEYS[1], KEYS[2], KEYS[3]) > 0 then
    publish_lost(ARGV[3], taken)
    publish(ARGV[1], 'deleted')
    if shared then
        publish(ARGV[2], 'deleted')
    end
    return 1
end
return 0
