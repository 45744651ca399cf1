-- clock_prelude: Redis's clock, for the scripts that judge leases, deadlines and offers by
-- it; prepended to them (after publish_prelude.lua, before the preludes that call it). Not an
-- operation of its own.
--
-- Every time a script compares or stores is the server's, never a client's: clients' clocks
-- differ and jump, while one server's TIME is the one clock every client's request is judged
-- by.

-- The server's time in milliseconds.
local function now_ms()
    local t = redis.call('TIME')
    return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
