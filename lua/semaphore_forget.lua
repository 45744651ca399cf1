-- semaphore_forget: a permit object lets go of its permits without returning them; drop its
-- record, which would otherwise wait for a release that never comes. (Prefixed with
-- semaphore_prelude.lua.)
--
-- KEYS[1]  attempt record of the acquire that took the permits
--
-- Returns 1 if the record was outstanding, 0 otherwise.

if taken_from(redis.call('GET', KEYS[1])) then
    redis.call('DEL', KEYS[1])
    return 1
end
return 0
