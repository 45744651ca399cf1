-- rate_limiter_acquire: one decision: take n units now if the rate allows it (GCRA).
-- (Prefixed with rate_limiter_prelude.lua.)
--
-- KEYS[1]  config hash (see rate_limiter_prelude)
-- KEYS[2]  state hash
-- ARGV[1]  n: units asked for (>= 1)
-- ARGV[2]  request id, unique to this decision, so that it can be given back
--
-- Returns {1, 0, remaining} when the units were taken; {0, retry_after, remaining} when not
-- (nothing changed; retry_after: microseconds until the same request would be allowed);
-- remaining: how many more units a request right after this one would get. {-1, 0, 0} when no
-- rate is set; {-2, burst + 1, 0} when n is more than the rate ever allows at once.
--
-- With T = per / rate and tolerance tau = (burst + 1) * T, a request at now is allowed iff
-- max(tat, now) + n * T - now <= tau; then tat = max(tat, now) + n * T.

local cfg = read_rate(KEYS[1])
if not cfg then
    return {-1, 0, 0}
end
local n = tonumber(ARGV[1])
if n > cfg.burst + 1 then
    return {-2, cfg.burst + 1, 0}
end
local now = now_us()
local state = redis.call('HMGET', KEYS[2], 'tat', 'rem')
local tat, rem = state[1], state[2]
-- start = max(tat, now): an absent (expired) state is a full bucket.
local sq, sr = now, 0
if tat then
    local q, r = tonumber(tat), tonumber(rem)
    if not le(q, r, now, 0) then
        sq, sr = q, r
    end
end
local nq, nr = units_time(cfg, n)
local newq, newr = add(sq, sr, nq, nr, cfg.rate)
local limq, limr = add(now, 0, cfg.tq, cfg.tr, cfg.rate)

-- The units that fit between (aq, ar) and the limit: at most burst + 1. The float estimate is
-- off by a few units at most; the exact comparisons settle it.
local function fitting(aq, ar)
    if not le(aq, ar, limq, limr) then
        return 0
    end
    local slack_q, slack_r = sub(limq, limr, aq, ar, cfg.rate)
    local k = math.floor((slack_q + slack_r / cfg.rate) * cfg.rate / cfg.per)
    k = math.max(0, math.min(k, cfg.burst + 1))
    while k < cfg.burst + 1 do
        local q, r = units_time(cfg, k + 1)
        if not le(q, r, slack_q, slack_r) then
            break
        end
        k = k + 1
    end
    while k > 0 do
        local q, r = units_time(cfg, k)
        if le(q, r, slack_q, slack_r) then
            break
        end
        k = k - 1
    end
    return k
end

if le(newq, newr, limq, limr) then
    redis.call('HSET', KEYS[2], 'tat', int(newq), 'rem', int(newr),
        'last', ARGV[2], 'ptat', int(sq), 'prem', int(sr))
    -- Idle state goes once the bucket is full again: then it means what no state means.
    local full_in = newq - now
    if newr > 0 then
        full_in = full_in + 1
    end
    redis.call('PEXPIRE', KEYS[2], string.format('%d', math.max(1, math.ceil(full_in / 1000))))
    return {1, 0, fitting(newq, newr)}
end
-- Denied, so start > now (n * T <= tau): allowed from the first microsecond t with
-- start + n * T - t <= tau.
local aq, ar = sub(newq, newr, cfg.tq, cfg.tr, cfg.rate)
if ar > 0 then
    aq = aq + 1
end
return {0, math.max(1, aq - now), fitting(sq, sr)}
