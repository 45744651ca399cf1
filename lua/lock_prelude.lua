-- lock_prelude: how a lock is granted and re-entered; prepended to the lock scripts that need
-- it, so this logic lives once. Not an operation of its own.
--
-- Layout of the lock hash: owner = <owner id>, count = <holds>, token = <fencing token>,
-- a:<attempt id> = 1 for every live hold ('fixed' once lock_set_lease fixed its lease, 'h'
-- for a hold handed over in a wake-up, see lock_hand_over_prelude), and
-- w = 1 while clients may be registered as waiting for the plain lock (wake_prelude's
-- registry; a fair lock's hash never has it): the release that frees the lock looks for one
-- to wake only then, so an uncontended release touches no other key. Every script that may
-- leave a client registered while the lock is held sets it. The hash exists exactly while the
-- lock is held: the last release deletes it. The fence is a counter that never expires.

-- Reads who holds `hash`: nil when the lock is free, else {owner, token}. One read answers
-- both "is it free" and "is it a lock": HLEN fails with WRONGTYPE on a key of another type,
-- and a hash without an owner is foreign data.
local function lock_holder(hash)
    if redis.call('HLEN', hash) == 0 then
        return nil
    end
    local holder = redis.call('HMGET', hash, 'owner', 'token')
    if not holder[1] then
        error({err = 'WRONGTYPE the lock key holds foreign data'})
    end
    return holder
end

-- Reads who holds `hash` for an acquire whose attempt record is `record`, and whether anyone
-- may be waiting: whether any of the keys that say so exists (`...`: the plain lock's
-- registry of waiting clients, the fair lock's queue and deadlines). The holder is false when
-- the attempt was given back before it ran (the record exists: its caller gave up, so it must
-- not grant), else as lock_holder. The common case, a free lock, an attempt never given back
-- and nobody waiting, costs one EXISTS; only when it finds a key does a second one tell the
-- waiting keys from the other two, and only when that finds exactly one does the hash's read
-- tell the record from the lock.
local function holder_and_waiting(hash, record, ...)
    local found = redis.call('EXISTS', record, hash, ...)
    if found == 0 then
        return nil, false
    end
    local found_lock = redis.call('EXISTS', record, hash)
    local waiting = found > found_lock
    if found_lock == 0 then
        return nil, waiting
    end
    return found_lock == 1 and lock_holder(hash) or false, waiting
end

-- Grants a free lock to `owner` for acquire attempt `attempt`, with a new fencing token;
-- `waiting`: clients may be registered as waiting (see the layout); `hold`: the value of the
-- attempt's field ('1', or 'h' for a hold handed over in a wake-up, see
-- lock_hand_over_prelude). Returns the token.
local function grant(hash, fence, owner, lease_ms, attempt, waiting, hold)
    local token = redis.call('INCR', fence)
    -- Strings, not Lua numbers: Redis 7.0 turns a number argument into text with a costly
    -- floating-point format; '%d' is an integer's.
    local token_text, field = string.format('%d', token), 'a:' .. attempt
    -- The fields as arguments, not a table unpacked: a table is one more thing to make and
    -- collect on every grant.
    if waiting then
        redis.call('HSET', hash, 'owner', owner, 'count', '1', 'token', token_text, field,
            hold or '1', 'w', '1')
    else
        redis.call('HSET', hash, 'owner', owner, 'count', '1', 'token', token_text, field,
            hold or '1')
    end
    redis.call('PEXPIRE', hash, lease_ms)
    return token
end

-- Adds a hold for attempt `attempt` to a lock its owner already holds. The expiry becomes the
-- longer of the current one and the new lease, since other holds may rely on it.
local function reenter(hash, lease_ms, attempt)
    redis.call('HINCRBY', hash, 'count', '1')
    redis.call('HSET', hash, 'a:' .. attempt, '1')
    redis.call('PEXPIRE', hash, lease_ms, 'GT')
end

-- Gives back the hold of attempt `attempt`. Returns 1 when the lock became free (the hash is
-- deleted), 0 when the owner still holds it through other holds, -1 when the attempt holds
-- nothing (its hold expired or was force-unlocked, or it never got one); and, with 1, whether
-- clients may be registered as waiting (see the layout).
local function release_hold(hash, attempt)
    local field = 'a:' .. attempt
    local h = redis.call('HMGET', hash, field, 'count', 'w')
    local held, count, waiting = h[1], h[2], h[3]
    if not held then
        return -1
    end
    if tonumber(count) <= 1 then
        redis.call('DEL', hash)
        return 1, waiting ~= false
    end
    redis.call('HDEL', hash, field)
    redis.call('HINCRBY', hash, 'count', '-1')
    return 0
end

-- The outcome recorded by an earlier give-back of the same attempt (see lock_release), or
-- nil; `remember_ms` is '0' for a release that keeps no record, which looks none up either.
local function recorded_outcome(record, remember_ms)
    if remember_ms ~= '0' then
        return redis.call('GET', record)
    end
end

-- Records a give-back's outcome for `remember_ms` (nothing when it is '0').
local function record_outcome(record, remember_ms, result)
    if remember_ms ~= '0' then
        redis.call('SET', record, result, 'PX', remember_ms)
    end
end
