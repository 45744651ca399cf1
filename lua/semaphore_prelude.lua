-- semaphore_prelude: the classic semaphore's layout and the helpers its scripts share;
-- prepended to each script that reads the semaphore (after semaphore_wake_prelude.lua where
-- a script frees permits). Not an operation of its own.
--
-- Layout:
--   permits     string: the number of available permits (may be negative)
--   generation  string: a unique id, written by whichever script creates the permits key and
--               deleted with it. A permits key found without one (written by hand, or by an
--               earlier redisync) has the empty generation ''. Scripts create it only along
--               with the permits, so one found without them is foreign data.
--   record      string, one per acquire attempt: 'granted:<generation>' while its permits
--               are out ('granted:' for the empty generation, and so is a bare 'granted', as
--               an earlier redisync wrote it), deleted when they come back or are forgotten.
--               Only an attempt given back before Redis may have run it leaves a record
--               behind: 'given back', expiring, so that it can no longer take permits. (Any
--               other record, such as the 'released' an earlier redisync left, expires.)
--   waiters     sorted set: the clients waiting, see wake_prelude.lua
-- Permits go back only to the generation they were taken from, so a semaphore deleted and
-- created again is not inflated by permits taken from its predecessor.

-- The available permits (nil when the semaphore does not exist), its generation ('' when it
-- has none) and, when `record` is given, the state of that attempt record (nil if none), in
-- one read. MGET reads a key of another type as nil, so foreign data is looked for where it
-- reads nil, and reported as WRONGTYPE, as is a count that is not a number or a generation
-- without a count.
local function read_semaphore(permits, generation, record)
    local values
    if record then
        values = redis.call('MGET', permits, generation, record)
    else
        values = redis.call('MGET', permits, generation)
    end
    local count, current, state = values[1], values[2], values[3]
    if not count then
        if current or redis.call('EXISTS', permits, generation) > 0 then
            error(redis.error_reply('WRONGTYPE the semaphore keys hold foreign data'))
        end
        return nil, '', state
    end
    local available = tonumber(count)
    if not available then
        error(redis.error_reply('WRONGTYPE the permits key holds no count'))
    end
    if not current and redis.call('EXISTS', generation) == 1 then
        error(redis.error_reply('WRONGTYPE the generation key holds foreign data'))
    end
    return available, current or '', state
end

-- The generation the permits of a record in `state` were taken from; nil unless they are out.
local function taken_from(state)
    return state and string.match(state, '^granted:?(.*)$')
end

-- Returns n permits taken from `generation` to the semaphore read_semaphore found
-- (`available` permits of generation `current`), unless it is gone (deleted since: it stays
-- deleted) or another generation now (the permits were not its). Returns the permits freed
-- and the permits available afterwards.
local function return_permits(permits, available, current, generation, n)
    if available and current == generation then
        return tonumber(n), redis.call('INCRBY', permits, n)
    end
    return 0, available or 0
end

