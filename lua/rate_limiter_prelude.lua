-- rate_limiter_prelude: what the rate limiter's scripts share. Not an operation of its own.
--
-- The limiter is GCRA on Redis's clock. Time is counted in microseconds of Redis's TIME, and an
-- instant is kept exactly as a pair (us, rem): us + rem / rate microseconds, 0 <= rem < rate, so
-- that the emission interval per / rate never rounds. Every integer stays below 2^53 (the client
-- refuses rates for which it would not), where Lua's doubles are exact.
--
-- Config hash (KEYS of the operations): rate, per (us), burst, pq, pr (per = pq * rate + pr) and
-- tq, tr (the tolerance (burst + 1) * per / rate = tq + tr / rate), all written by the client's
-- set_rate / try_set_rate.
-- State hash: tat, rem (the theoretical arrival time), and for the last allowed decision only:
-- last (its request id), ptat, prem (the arrival time before it), so it can be given back.

-- q, r with a = q * b + r and 0 <= r < b. A float division alone may round up across an integer;
-- the remainder check puts it right (every value is an exact integer below 2^53).
local function divmod(a, b)
    local q = math.floor(a / b)
    local r = a - q * b
    if r < 0 then
        q = q - 1
        r = r + b
    elseif r >= b then
        q = q + 1
        r = r - b
    end
    return q, r
end

-- The rate in `key`, or nil if none is set.
local function read_rate(key)
    local f = redis.call('HMGET', key, 'rate', 'per', 'burst', 'pq', 'pr', 'tq', 'tr')
    if not f[1] then
        return nil
    end
    return {
        rate = tonumber(f[1]), per = tonumber(f[2]), burst = tonumber(f[3]),
        pq = tonumber(f[4]), pr = tonumber(f[5]), tq = tonumber(f[6]), tr = tonumber(f[7]),
    }
end

-- The time k units take, k * per / rate, as a pair (k <= burst + 1 keeps k * pr below 2^53).
local function units_time(cfg, k)
    local q, r = divmod(k * cfg.pr, cfg.rate)
    return k * cfg.pq + q, r
end

-- (aq, ar) + (bq, br)
local function add(aq, ar, bq, br, rate)
    local r = ar + br
    if r >= rate then
        return aq + bq + 1, r - rate
    end
    return aq + bq, r
end

-- (aq, ar) - (bq, br)
local function sub(aq, ar, bq, br, rate)
    local r = ar - br
    if r < 0 then
        return aq - bq - 1, r + rate
    end
    return aq - bq, r
end

-- (aq, ar) <= (bq, br)
local function le(aq, ar, bq, br)
    return aq < bq or (aq == bq and ar <= br)
end

-- Redis's clock, in microseconds.
local function now_us()
    local t = redis.call('TIME')
    return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- An integer as Redis should store it: never in exponent notation.
local function int(x)
    return string.format('%.0f', x)
end

-- Writes a rate's fields (ARGV[1..7] of set_rate and try_set_rate) to `key`.
local function write_rate(key, args)
    redis.call('HSET', key, 'rate', args[1], 'per', args[2], 'burst', args[3],
        'pq', args[4], 'pr', args[5], 'tq', args[6], 'tr', args[7])
end
