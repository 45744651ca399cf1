-- rwlock_prelude: helpers shared by the rwlock scripts that work on holds; prepended to each
-- of them (after clock_prelude.lua where a script reads the clock), so the layout logic lives
-- once. Not an operation of its own.
--
-- Layout (KEYS[1] and KEYS[2] of every rwlock script that touches holds):
--   hash     mode = 'read' | 'write'; present whenever the hash exists, so a hash without it
--            is foreign data
--            writer = <owner id>, wcount = <write holds>, wtoken = <fencing token>,
--            wexp = <end of the write lease, server ms>
--            r:<owner> = <read holds of that owner>
--            a:<attempt> = 'w' .. <token> for a write hold, 'r' .. <owner> for a read hold
--            rc = <read holds>: the members of readers (live or not pruned yet)
--            exp = <when both keys expire, server ms>: the end of the longest hold
--            w:<waiter> = '1' for each acquire call (one waiter id for all its attempts) that
--                found the lock taken and waits: registered by its busy attempt, removed by its
--                grant, or by its withdrawal when it gives up, fails or is cancelled
--            w = <registered waiters>: a release that lets anyone in publishes only if there
--                are any; nobody waits, nothing is published
--            wm = '1' while a write hold granted over waiting writers' marks lives: readers
--                held back by those marks (on a free lock, where they could not register)
--                may wait for its release
--            sh = '1' once a read hold shared by a client's local readers was taken: a writer
--                 that starts waiting then tells those clients to stop admitting readers
--   readers  sorted set: <attempt> -> end of that read hold's lease (server ms)
-- Every hold has its own lease; both keys expire at `exp`, so a crashed reader or writer
-- blocks nobody beyond its own lease. Since `exp` is the end of the longest hold and both keys
-- expire then, a key that still exists proves that the hold ending at `exp` is live: a
-- release of that hold needs no clock.

-- Who holds the lock: the writer's owner id, if any, and every read hold's attempt id, all
-- of them '<client id>:...' (for publish_lost).
local function holders(hash, readers)
    local all = redis.call('ZRANGE', readers, 0, -1)
    local writer = redis.call('HGET', hash, 'writer')
    if writer then
        table.insert(all, writer)
    end
    return all
end

local function foreign_data()
    error({err = 'WRONGTYPE the read-write lock key holds foreign data'})
end

-- What an acquire's single EXISTS over (hash, attempt record, waiting writers) counted besides
-- the hash: `mode` is the hash's mode field (nil when the hash is missing or foreign, which
-- fails here). Returns nil when the attempt was given back before it ran (its record
-- exists), else whether waiting writers' marks exist.
local function marks_besides_hash(present, hash, mode, record)
    local others = present
    if mode then
        others = others - 1
    elseif redis.call('EXISTS', hash) == 1 then
        foreign_data()
    end
    if others == 2 or (others == 1 and redis.call('EXISTS', record) == 1) then
        return nil
    end
    return others == 1
end

-- Fails with WRONGTYPE when the lock's keys hold something else: a hash without a mode or a
-- non-sorted-set under readers or waiting writers. For the operations off the hot path
-- (status, force_unlock, delete); called before anything is written.
local function check_rwlock_keys(hash, readers, writers)
    if not redis.call('HGET', hash, 'mode') and redis.call('EXISTS', hash) == 1 then
        foreign_data()
    end
    redis.call('ZCARD', readers)
    if writers then
        redis.call('ZCARD', writers)
    end
end

-- Forgets the read holds whose lease ended by `now` (their owners' counts and attempt fields
-- too). Returns how many there were.
local function prune_readers(hash, readers, now)
    local expired = redis.call('ZRANGEBYSCORE', readers, '-inf', now)
    for _, attempt in ipairs(expired) do
        local kind = redis.call('HGET', hash, 'a:' .. attempt)
        if kind then
            local owner_field = 'r:' .. string.sub(kind, 2)
            if redis.call('HINCRBY', hash, owner_field, -1) <= 0 then
                redis.call('HDEL', hash, owner_field, 'a:' .. attempt)
            else
                redis.call('HDEL', hash, 'a:' .. attempt)
            end
        end
    end
    if #expired > 0 then
        redis.call('ZREMRANGEBYSCORE', readers, '-inf', now)
        redis.call('HINCRBY', hash, 'rc', -#expired)
    end
    return #expired
end

-- Forgets a write hold whose lease ended (its holder crashed, or lost it), with its attempts'
-- fields: the hash may outlive the hold (the owner's read holds keep it), and a crashed writer
-- never releases its attempts. There is one write hold at a time, so every write attempt field
-- is this hold's.
local function drop_write_hold(hash)
    redis.call('HDEL', hash, 'writer', 'wcount', 'wtoken', 'wexp', 'wm')
    local all = redis.call('HGETALL', hash)
    for i = 1, #all, 2 do
        if string.sub(all[i], 1, 2) == 'a:' and string.sub(all[i + 1], 1, 1) == 'w' then
            redis.call('HDEL', hash, all[i])
        end
    end
end

-- The end of the longest read hold left, or of the write hold `wexp` if later (server ms; 0
-- when nothing is left).
local function longest_hold(readers, wexp)
    local last = redis.call('ZRANGE', readers, -1, -1, 'WITHSCORES')
    return math.max(tonumber(last[2] or 0), tonumber(wexp or 0))
end

-- Makes both keys expire at `until_ms` (the caller records it in `exp`).
local function expire_keys(hash, readers, until_ms)
    redis.call('PEXPIREAT', hash, until_ms)
    redis.call('PEXPIREAT', readers, until_ms)
end

-- Registers `waiter` as waiting, in the hash: its field `w:<waiter>`, and one more in `w`
-- (`count`: `w` as read). The hash must exist.
local function add_waiter_field(hash, waiter, count)
    redis.call('HSET', hash, 'w:' .. waiter, 1, 'w', tonumber(count or 0) + 1)
end

-- Takes `waiter`'s registration out of the hash, if it has one: its field `w:<waiter>`, and
-- one less in `w` (which goes at 0).
local function remove_waiter_field(hash, waiter)
    if redis.call('HDEL', hash, 'w:' .. waiter) == 1
        and redis.call('HINCRBY', hash, 'w', -1) <= 0 then
        redis.call('HDEL', hash, 'w')
    end
end

-- HSET of a list of field, value pairs (nothing when the list is empty).
local function hset(hash, fields)
    if #fields > 0 then
        redis.call('HSET', hash, unpack(fields))
    end
end

