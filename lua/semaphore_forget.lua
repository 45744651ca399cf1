-- semaphore_forget: a permit object lets go of its permits without returning them; drop its
-- record, which would otherwise wait for a release that never comes.
--
-- KEYS[1]  attempt record of the acquire that took the permits
--
-- Returns 1 if the record was outstanding, 0 otherwise.

if redis.call('GET', KEYS[1]) == 'granted' then
    redis.call('DEL', KEYS[1])
    return 1
end
return 0
