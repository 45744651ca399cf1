-- semaphore_prelude: helpers shared by the classic semaphore's scripts that take, return,
-- forget or delete permits; prepended to each of them. Not an operation of its own.
--
-- Layout:
--   permits     string: the number of available permits (may be negative)
--   generation  string: a unique id, written by whichever script creates the permits key and
--               deleted with it; absent on a semaphore created before generations existed.
--               Scripts create it only along with the permits, so one found without them is
--               foreign data.
--   record      string, one per acquire attempt: 'granted:<generation>' while its permits
--               are out ('granted:' when the semaphore had no generation; older redisync
--               versions wrote 'granted'), then 'released' or 'given back' for a while
-- Permits go back only to the generation they were taken from, so a semaphore deleted and
-- created again is not inflated by permits taken from its predecessor.

-- The available permits (nil when the semaphore does not exist) and its generation ('' when
-- it has none). Foreign data under either key is a WRONGTYPE error: GET raises it for other
-- types, and a count that is not a number or a generation without a count is checked here.
-- (Two GETs rather than one MGET, which reads other types as nil and is not among the
-- commands DEPLOYMENT.md's ACL grants.)
local function read_semaphore(permits, generation)
    local count = redis.call('GET', permits)
    local current = redis.call('GET', generation)
    if not count then
        if current then
            error(redis.error_reply('WRONGTYPE the generation key exists without permits'))
        end
        return nil, ''
    end
    local available = tonumber(count)
    if not available then
        error(redis.error_reply('WRONGTYPE the permits key holds no count'))
    end
    return available, current or ''
end

-- The generation the permits of a record in `state` were taken from; nil unless they are out.
local function taken_from(state)
    return state and string.match(state, '^granted:?(.*)$')
end

-- Returns n permits taken from `generation` and wakes waiters, unless the semaphore was
-- deleted since (it stays deleted) or is another generation now (the permits were not its).
local function give_permits_back(permits, generation_key, generation, n, channel)
    local available, current = read_semaphore(permits, generation_key)
    if available and current == generation then
        redis.call('INCRBY', permits, n)
        redis.call('PUBLISH', channel, n)
    end
end

